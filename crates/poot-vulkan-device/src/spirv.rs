//! WGSL to SPIR-V through naga's SPIR-V writer, with the runtime checks wgpu compiles with: an
//! out-of-range index is clamped into its array or binding (so a kernel that recorded a fault
//! and runs on stays inside its buffers), integer division by zero is defined, every loop is
//! bounded, and workgroup memory starts zeroed as WGSL says.

use naga::back::spv;
use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// How this device's shaders are written.
#[derive(Clone, Debug)]
pub(crate) struct SpirvTarget {
    /// The newest SPIR-V the device's Vulkan version takes.
    lang_version: (u8, u8),
    /// Whether the device zero-fills workgroup memory itself.
    native_zero_init: bool,
}

impl SpirvTarget {
    pub(crate) fn new(api_version: u32, native_zero_init: bool) -> SpirvTarget {
        let lang_version = if api_version >= ash::vk::API_VERSION_1_3 {
            (1, 6)
        } else {
            // Vulkan 1.2, the oldest the device opens.
            (1, 5)
        };
        SpirvTarget {
            lang_version,
            native_zero_init,
        }
    }

    fn options(&self) -> spv::Options<'static> {
        spv::Options {
            lang_version: self.lang_version,
            flags: spv::WriterFlags::empty(),
            // Without a binding map, each `@group(g) @binding(b)` is descriptor set g, binding b.
            fake_missing_bindings: true,
            capabilities: None,
            bounds_check_policies: BoundsCheckPolicies {
                index: BoundsCheckPolicy::Restrict,
                buffer: BoundsCheckPolicy::Restrict,
                image_load: BoundsCheckPolicy::Restrict,
                binding_array: BoundsCheckPolicy::Unchecked,
            },
            zero_initialize_workgroup_memory: if self.native_zero_init {
                spv::ZeroInitializeWorkgroupMemoryMode::Native
            } else {
                spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
            },
            force_loop_bounding: true,
            emit_int_div_checks: true,
            ..spv::Options::default()
        }
    }

    /// Parses, validates and translates one WGSL compute entry point to SPIR-V words. The
    /// error is naga's report, with the source.
    pub(crate) fn translate(&self, source: &str, entry: &str) -> Result<Vec<u32>, String> {
        let module = naga::front::wgsl::parse_str(source)
            .map_err(|e| format!("{}\n---- WGSL ----\n{source}", e.emit_to_string(source)))?;
        let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
            .validate(&module)
            .map_err(|e| format!("{}\n---- WGSL ----\n{source}", e.emit_to_string(source)))?;
        let pipeline = spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry.to_owned(),
        };
        spv::write_vec(&module, &info, &self.options(), Some(&pipeline))
            .map_err(|e| format!("SPIR-V writer: {e}\n---- WGSL ----\n{source}"))
    }
}
