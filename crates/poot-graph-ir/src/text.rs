//! A readable text form of a graph, in the spirit of a jaxpr, for debugging and golden tests.

use std::fmt::{self, Write};

use crate::graph::Graph;
use crate::op::OpKind;
use crate::storage::Storage;

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self))
    }
}

/// Renders the graph: inputs by kind, one line per equation, then outputs and state pairs.
pub fn render(g: &Graph) -> String {
    let mut s = String::new();
    let vals = g.values();
    let mut section = |title: &str, pick: &dyn Fn(&Storage) -> Option<String>| {
        let items: Vec<String> = vals
            .iter()
            .enumerate()
            .filter_map(|(i, v)| pick(&v.storage).map(|n| format!("%{i}={n}:{}", v.ty)))
            .collect();
        if !items.is_empty() {
            let _ = writeln!(s, "{title} {}", items.join(" "));
        }
    };
    section("const", &|st| match st {
        Storage::Const(n) => Some(n.clone()),
        _ => None,
    });
    section("slot", &|st| match st {
        Storage::Slot(n) => Some(n.name().to_string()),
        _ => None,
    });
    section("state", &|st| match st {
        Storage::State(n) => Some(n.clone()),
        _ => None,
    });
    for e in g.eqns() {
        let v = &vals[e.out.index()];
        let args: Vec<String> = e.inputs.iter().map(|i| i.to_string()).collect();
        let _ = write!(
            s,
            "  {}:{} = {}{} {}",
            e.out,
            v.ty,
            e.op.name(),
            params(&e.op),
            args.join(" ")
        );
        if !v.label.is_empty() {
            let _ = write!(s, "  # {}", v.label);
        }
        s.push('\n');
    }
    let outs: Vec<String> = g.outputs().primary.iter().map(|o| o.to_string()).collect();
    let _ = write!(s, "out ({})", outs.join(", "));
    for (si, so) in &g.outputs().state {
        let _ = write!(s, " state {si} <- {so}");
    }
    s.push('\n');
    s
}

fn params(op: &OpKind) -> String {
    match op {
        OpKind::Literal(v) => format!("[{v}]"),
        OpKind::Iota { shape, axis, dtype } => format!("[{dtype}{shape} axis={axis}]"),
        OpKind::Cast { to } => format!("[{to}]"),
        OpKind::Reshape { shape } | OpKind::Broadcast { shape } => format!("[{shape}]"),
        OpKind::Transpose { perm } => format!("[{perm:?}]"),
        OpKind::Slice { starts, ends } => format!("[{starts:?}..{ends:?}]"),
        OpKind::DynamicSlice { sizes } => format!("[{sizes:?}]"),
        OpKind::Concat { axis }
        | OpKind::Gather { axis }
        | OpKind::TakeAlong { axis }
        | OpKind::ScatterUpdate { axis }
        | OpKind::Reduce { axis, .. }
        | OpKind::ArgMax { axis } => format!("[axis={axis}]"),
        OpKind::ArgTopK { k } => format!("[k={k}]"),
        OpKind::AllReduceSum { ranks } => format!("[ranks={ranks}]"),
        OpKind::BroadcastFrom { root, ranks } => format!("[root={root} ranks={ranks}]"),
        OpKind::MatMul { transpose_rhs } => {
            if *transpose_rhs {
                "[rhs^T]".to_string()
            } else {
                String::new()
            }
        }
        OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::DynamicUpdateSlice
        | OpKind::IndexedMatMul => String::new(),
    }
}
