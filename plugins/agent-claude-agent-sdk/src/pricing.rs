//! What a turn costs, from its token counts and the model's list prices.
//!
//! Prices are USD per million tokens, from Anthropic's published price list; a model
//! this table does not know has no cost unless `options.pricing` gives its prices, and
//! then a cost limit cannot be enforced (the driver refuses to start rather than run
//! unbounded).

use serde::Deserialize;

use crate::messages::Tokens;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pricing {
    pub input_per_m_tok: f64,
    pub output_per_m_tok: f64,
    /// Writing the prompt cache (5-minute entries).
    pub cache_write_per_m_tok: f64,
    pub cache_read_per_m_tok: f64,
}

const fn price(input: f64, output: f64) -> Pricing {
    Pricing {
        input_per_m_tok: input,
        output_per_m_tok: output,
        cache_write_per_m_tok: input * 1.25,
        cache_read_per_m_tok: input * 0.1,
    }
}

/// Model id prefixes and their prices; the first match wins, so longer ids come first.
const PRICES: &[(&str, Pricing)] = &[
    ("claude-opus-4-5", price(5.0, 25.0)),
    ("claude-opus-4-6", price(5.0, 25.0)),
    ("claude-opus-4", price(15.0, 75.0)),
    ("claude-3-opus", price(15.0, 75.0)),
    ("claude-sonnet-4", price(3.0, 15.0)),
    ("claude-3-7-sonnet", price(3.0, 15.0)),
    ("claude-3-5-sonnet", price(3.0, 15.0)),
    ("claude-haiku-4", price(1.0, 5.0)),
    ("claude-3-5-haiku", price(0.8, 4.0)),
    ("claude-3-haiku", price(0.25, 1.25)),
];

/// The list prices of `model`, if known.
pub fn list_price(model: &str) -> Option<Pricing> {
    PRICES
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|(_, p)| *p)
}

impl Pricing {
    /// The cost of `tokens`, in USD.
    pub fn cost(&self, tokens: &Tokens) -> f64 {
        let m = |n: u64, per: f64| n as f64 * per / 1_000_000.0;
        m(tokens.input_tokens, self.input_per_m_tok)
            + m(tokens.output_tokens, self.output_per_m_tok)
            + m(
                tokens.cache_creation_input_tokens,
                self.cache_write_per_m_tok,
            )
            + m(tokens.cache_read_input_tokens, self.cache_read_per_m_tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_by_model_family() {
        let tokens = Tokens {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            cache_creation_input_tokens: 1_000_000,
            cache_read_input_tokens: 1_000_000,
        };
        let cost = list_price("claude-sonnet-4-5-20250929")
            .unwrap()
            .cost(&tokens);
        assert!((cost - (3.0 + 15.0 + 3.75 + 0.3)).abs() < 1e-9, "{cost}");
        assert_eq!(list_price("claude-opus-4-5").unwrap().input_per_m_tok, 5.0);
        assert_eq!(list_price("claude-opus-4-1").unwrap().input_per_m_tok, 15.0);
        assert!(list_price("gpt-5").is_none());
    }
}
