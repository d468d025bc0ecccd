//! The one table of features that do not compose. Every pair check in the driver goes through
//! [`check_compatible`], so a refused combination is one typed error naming both features.

use std::fmt;

use super::Layout;
use crate::sampling::Head;

/// A feature of the driver or of a request, as it meets another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Feature {
    /// The KV layout the driver serves with.
    Layout(Layout),
    /// How many sequences one step carries.
    Rows(usize),
    /// The head a step ends in.
    Head(Head),
    /// Several decode steps chained on the device, the host waiting once.
    Chain,
    /// Reusing KV blocks of earlier requests with the same prompt prefix.
    PrefixCache,
    /// Per-request inputs a model declares (images, adapters' extra rows).
    RequestInputs,
    /// LoRA adapter tables in every step.
    Lora,
    /// The devices the model is placed on.
    Devices(usize),
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Feature::Layout(Layout::Contiguous) => f.write_str("the contiguous KV layout"),
            Feature::Layout(Layout::Paged { .. }) => f.write_str("the paged KV layout"),
            Feature::Rows(n) => write!(f, "{n} rows per step"),
            Feature::Head(h) => write!(f, "the {h:?} head"),
            Feature::Chain => f.write_str("chained decode"),
            Feature::PrefixCache => f.write_str("the prefix cache"),
            Feature::RequestInputs => f.write_str("request inputs"),
            Feature::Lora => f.write_str("LoRA adapters"),
            Feature::Devices(n) => write!(f, "a placement over {n} devices"),
        }
    }
}

/// Two features the table refuses together.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{a} and {b} do not compose: {reason}")]
pub struct Incompatible {
    pub a: String,
    pub b: String,
    pub reason: &'static str,
}

/// Whether a feature is one side of a refused pair.
type Side = fn(&Feature) -> bool;

/// The refused pairs, each with its reason; order within a pair does not matter.
const TABLE: &[(Side, Side, &str)] = &[
    (
        |f| matches!(f, Feature::Layout(Layout::Contiguous)),
        |f| matches!(f, Feature::Rows(n) if *n > 1),
        "a one-row prefill entry cannot write another row's contiguous cache; serve several rows \
         with Layout::Paged",
    ),
    (
        |f| matches!(f, Feature::Chain),
        |f| matches!(f, Feature::Head(Head::Logits)),
        "a chained step feeds each pick to the next on the device, and the logits head picks nothing",
    ),
    (
        |f| matches!(f, Feature::PrefixCache),
        |f| matches!(f, Feature::RequestInputs),
        "the prefix cache keys on tokens alone, so a sequence with request inputs may not reuse \
         or register blocks",
    ),
    (
        |f| matches!(f, Feature::Lora),
        |f| matches!(f, Feature::Devices(n) if *n > 1),
        "adapter tables adapt whole projections on one device; a tensor-parallel or pipeline \
         group would need them split",
    ),
];

/// Refuses `a` with `b` when the table does.
pub fn check_compatible(a: Feature, b: Feature) -> Result<(), Incompatible> {
    for (left, right, reason) in TABLE {
        if (left(&a) && right(&b)) || (left(&b) && right(&a)) {
            return Err(Incompatible {
                a: a.to_string(),
                b: b.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_refuses_each_pair_in_either_order_and_nothing_else() {
        let paged = Layout::Paged {
            block_tokens: 16,
            blocks: 64,
        };
        let refused = [
            (Feature::Layout(Layout::Contiguous), Feature::Rows(2)),
            (Feature::Chain, Feature::Head(Head::Logits)),
            (Feature::PrefixCache, Feature::RequestInputs),
        ];
        for (a, b) in refused {
            let e = check_compatible(a, b).unwrap_err();
            assert!(e.to_string().contains(&a.to_string()), "{e}");
            assert!(e.to_string().contains(&b.to_string()), "{e}");
            assert_eq!(check_compatible(b, a).unwrap_err().reason, e.reason);
        }
        let fine = [
            (Feature::Layout(Layout::Contiguous), Feature::Rows(1)),
            (Feature::Layout(paged), Feature::Rows(8)),
            (Feature::Chain, Feature::Head(Head::Sample)),
            (Feature::PrefixCache, Feature::Layout(paged)),
        ];
        for (a, b) in fine {
            assert_eq!(check_compatible(a, b), Ok(()));
        }
    }
}
