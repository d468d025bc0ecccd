//! AQL kernel-dispatch packets: the 64 bytes the GPU's packet processor reads from the queue,
//! built once per launch on the host ([`dispatch_packet`]) and copied into a queue slot at each
//! submission, the header word last.
//!
//! Every packet sets the barrier bit, so a kernel starts only after the one before it has
//! finished and its writes are visible (the fences' scope): the queue runs a recording in order,
//! as a CUDA stream does.

use crate::hsa::Signal;

/// 32-bit words of one packet.
pub(crate) const PACKET_WORDS: usize = 16;

const PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
const HEADER_BARRIER: u16 = 1 << 8;
const HEADER_ACQUIRE_SCOPE_SHIFT: u16 = 9;
const HEADER_RELEASE_SCOPE_SHIFT: u16 = 11;
/// Dimensions of every dispatch (a workgroup is `[threads, 1, 1]`).
const SETUP_DIMENSIONS: u16 = 3;

/// How far a packet's acquire or release fence reaches (`hsa_fence_scope_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FenceScope {
    /// The GPU: enough between kernels of one queue.
    Agent = 1,
    /// The whole system: at the ends of a submission, so host copies before it are seen and
    /// the host sees its results.
    System = 2,
}

/// One kernel dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dispatch {
    /// Threads per workgroup (x only).
    pub(crate) workgroup: u32,
    /// Workgroups along x, y, z.
    pub(crate) groups: [u32; 3],
    pub(crate) group_segment_bytes: u32,
    pub(crate) private_segment_bytes: u32,
    /// The kernel's code handle (`HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT`).
    pub(crate) kernel_object: u64,
    /// The address of its kernel arguments.
    pub(crate) kernarg_address: u64,
    /// Decremented when the kernel completes (0: none).
    pub(crate) completion: Signal,
    pub(crate) acquire: FenceScope,
    pub(crate) release: FenceScope,
}

/// Why a dispatch cannot be expressed as a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PacketError {
    /// A workgroup over the packet's 16-bit field, or empty.
    Workgroup(u32),
    /// A grid whose work-items along x overflow the packet's 32-bit field.
    Grid([u32; 3]),
}

/// The packet for `d`, as 16 little-endian words (word 0: header and setup).
pub(crate) fn dispatch_packet(d: &Dispatch) -> Result<[u32; PACKET_WORDS], PacketError> {
    let workgroup = u16::try_from(d.workgroup)
        .ok()
        .filter(|&w| w > 0)
        .ok_or(PacketError::Workgroup(d.workgroup))?;
    let grid_x = d.groups[0]
        .checked_mul(d.workgroup)
        .ok_or(PacketError::Grid(d.groups))?;
    let header = PACKET_TYPE_KERNEL_DISPATCH
        | HEADER_BARRIER
        | (d.acquire as u16) << HEADER_ACQUIRE_SCOPE_SHIFT
        | (d.release as u16) << HEADER_RELEASE_SCOPE_SHIFT;
    let mut w = [0u32; PACKET_WORDS];
    w[0] = u32::from(header) | u32::from(SETUP_DIMENSIONS) << 16;
    // workgroup_size_x, _y; _z and a reserved half.
    w[1] = u32::from(workgroup) | 1 << 16;
    w[2] = 1;
    // grid_size_x, _y, _z in work-items.
    w[3] = grid_x;
    w[4] = d.groups[1];
    w[5] = d.groups[2];
    w[6] = d.private_segment_bytes;
    w[7] = d.group_segment_bytes;
    w[8] = d.kernel_object as u32;
    w[9] = (d.kernel_object >> 32) as u32;
    w[10] = d.kernarg_address as u32;
    w[11] = (d.kernarg_address >> 32) as u32;
    // reserved2 (words 12, 13) stays zero.
    w[14] = d.completion.handle as u32;
    w[15] = (d.completion.handle >> 32) as u32;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatch() -> Dispatch {
        Dispatch {
            workgroup: 256,
            groups: [10, 2, 3],
            group_segment_bytes: 4096,
            private_segment_bytes: 16,
            kernel_object: 0x1122_3344_5566_7788,
            kernarg_address: 0x0000_7f00_dead_beef,
            completion: Signal { handle: 0xabcd },
            acquire: FenceScope::System,
            release: FenceScope::Agent,
        }
    }

    #[test]
    fn fields_sit_where_hsa_kernel_dispatch_packet_t_has_them() {
        let w = dispatch_packet(&dispatch()).unwrap_or_else(|e| panic!("{e:?}"));
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or_default());
        assert_eq!(bytes.len(), 64);
        // Header: kernel dispatch, barrier, acquire system (2 << 9), release agent (1 << 11).
        assert_eq!(u16_at(0), 2 | 1 << 8 | 2 << 9 | 1 << 11);
        assert_eq!(u16_at(2), 3);
        assert_eq!((u16_at(4), u16_at(6), u16_at(8)), (256, 1, 1));
        assert_eq!((u32_at(12), u32_at(16), u32_at(20)), (2560, 2, 3));
        assert_eq!((u32_at(24), u32_at(28)), (16, 4096));
        assert_eq!(u64_at(32), 0x1122_3344_5566_7788);
        assert_eq!(u64_at(40), 0x0000_7f00_dead_beef);
        assert_eq!(u64_at(48), 0);
        assert_eq!(u64_at(56), 0xabcd);
    }

    #[test]
    fn grids_and_workgroups_outside_the_fields_are_refused() {
        let mut d = dispatch();
        d.groups[0] = u32::MAX / 100;
        assert_eq!(dispatch_packet(&d), Err(PacketError::Grid(d.groups)));
        d = dispatch();
        d.workgroup = 70_000;
        assert_eq!(dispatch_packet(&d), Err(PacketError::Workgroup(70_000)));
        d.workgroup = 0;
        assert_eq!(dispatch_packet(&d), Err(PacketError::Workgroup(0)));
    }
}
