//! The loader's properties on seeded mutations of DESIGN.md's example (the same cases every run):
//! lines dropped, repeated or moved, and values and punctuation swapped for ones YAML or the
//! schema reads differently.

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::registry_text;
use crate::discovery::registry_file::tests::DESIGN_EXAMPLE;

/// Mutated files (~1 in 15 is still a valid registry): ~3 s in a debug build.
const CASES: usize = 1500;

/// What a mutation writes in place of a word: other types, limits, YAML's own syntax.
const WORDS: &[&str] = &[
    "0",
    "-1",
    "1e400",
    "18446744073709551616",
    "0.0",
    "NaN",
    "~",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "&a x",
    "*a",
    "!!binary x",
    "- ",
    ": ",
    "0s",
    "99999999999h",
    "1ms",
    "[",
    "{ a: ",
    "\"(\"",
    "\"a{2,1}\"",
    "Exact",
    "RegularExpression",
    "10.0.0.1:0",
    "[::1]:80",
    "é",
];

fn mutate(rng: &mut SmallRng, base: &str) -> String {
    let mut lines: Vec<String> = base.lines().map(str::to_owned).collect();
    for _ in 0..rng.gen_range(1..=3) {
        let at = rng.gen_range(0..lines.len());
        match rng.gen_range(0..5) {
            0 => {
                lines.remove(at);
            }
            1 => {
                let copy = lines[at].clone();
                lines.insert(rng.gen_range(0..=lines.len()), copy);
            }
            2 => {
                // Re-indent: the line moves to another level of the tree.
                let line = lines[at].trim_start().to_owned();
                lines[at] = format!("{}{line}", " ".repeat(rng.gen_range(0..10)));
            }
            _ => {
                // Replace the last word of the line (usually a value) or a character in it.
                let word = WORDS[rng.gen_range(0..WORDS.len())];
                let line = &lines[at];
                lines[at] = match line.rfind([' ', ':']) {
                    Some(i) if rng.gen_bool(0.7) => format!("{} {word}", &line[..=i]),
                    _ => {
                        let cut = line
                            .char_indices()
                            .map(|(i, _)| i)
                            .nth(rng.gen_range(0..=line.chars().count().max(1) - 1))
                            .unwrap_or(0);
                        format!("{}{word}{}", &line[..cut], &line[cut..])
                    }
                };
            }
        }
    }
    lines.join("\n")
}

#[test]
fn the_design_example_is_accepted_and_routes() {
    registry_text(DESIGN_EXAMPLE.as_bytes());
    assert!(crate::discovery::registry_file::parse("x", DESIGN_EXAMPLE).is_ok());
}

#[test]
fn mutated_registries_are_refused_with_their_place_or_accepted_and_route() {
    let mut rng = SmallRng::seed_from_u64(0x0e61_5781);
    for _ in 0..CASES {
        let text = mutate(&mut rng, DESIGN_EXAMPLE);
        registry_text(text.as_bytes());
    }
}
