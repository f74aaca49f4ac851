//! Property test: arbitrary text, YAML-shaped token soup and mutated real TaskSpecs all keep the
//! properties of `robustness::check`. Case counts are modest so it runs in seconds in CI; the
//! fuzz target (`fuzz/`) searches the same properties for longer.

use proptest::prelude::*;

use super::convergence_tests::EVERY_FIELD;
use super::robustness::check;
use super::tests::FIXTURES;

/// Pieces that exercise the tokenizer: indicators, quotes, block scalars, anchors, tags, breaks.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ": ",
    ":",
    "- ",
    "-",
    "? ",
    "\"",
    "'",
    "\\",
    "#",
    " #",
    "|",
    ">-",
    "|2",
    "&a ",
    "*a",
    "!t ",
    "!!str ",
    "%",
    "---",
    "...",
    "\n",
    "\r\n",
    "  ",
    "\t",
    "a",
    "key",
    "${TOKEN}",
    "${BIG}",
    "${NEWLINES}",
    "${NOPE}",
    "$${",
    "9223372036854775807s",
    "30d",
    "1Ti",
    "0.5",
    ".nan",
    "~",
    "é",
    "\u{85}",
    "\u{2028}",
    "\u{feff}",
];

/// One edit of a text: replace the bytes in a range (taken modulo the length) with a token.
#[derive(Debug, Clone)]
struct Edit {
    at: usize,
    remove: usize,
    insert: &'static str,
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_string();
    for edit in edits {
        let mut at = edit.at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let mut end = (at + edit.remove).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        text.replace_range(at..end, edit.insert);
    }
    text
}

fn edit() -> impl Strategy<Value = Edit> {
    (any::<usize>(), 0usize..8, prop::sample::select(TOKENS))
        .prop_map(|(at, remove, insert)| Edit { at, remove, insert })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..200)) {
        check(&tokens.concat());
    }

    #[test]
    fn mutated_taskspecs_never_panic(
        fixture in prop::sample::select(&FIXTURES[..]),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        check(&apply(fixture.1, &edits));
    }

    #[test]
    fn mutated_convergence_and_delivery_never_panic(edits in prop::collection::vec(edit(), 1..6)) {
        check(&apply(EVERY_FIELD, &edits));
    }
}
