//! Rewrites one changed list item key by key: the lines of keys whose value is unchanged are kept
//! byte for byte (comments included), a changed key's block is re-rendered, a removed key's block
//! is dropped and a new key goes at the end. Block mappings (`policy:` and deeper) are edited the
//! same way one level down. Anything the line scanner is unsure of gives `None`, and the caller
//! renders the item whole.

use serde_yaml::{Mapping, Value};

use super::{
    render,
    scan::{self, Line},
};

/// The new text of the list item `original` (from its `-` to its last content line) whose value
/// goes from `old` to `new`, both as `render::value` gives them.
pub(crate) fn item(
    original: &str,
    old: &Value,
    new: &Value,
    indented_lists: bool,
) -> Option<String> {
    let (Value::Mapping(old), Value::Mapping(new)) = (old, new) else {
        return None;
    };
    let lines = scan::lines(original)?;
    let first = lines.first()?;
    let after_dash = first.body.strip_prefix('-')?;
    let gap = after_dash.len() - after_dash.trim_start_matches(' ').len();
    if gap == 0 {
        return None;
    }
    let key_col = first.indent? + 1 + gap;
    let edit = Edit {
        src: original,
        lines: &lines,
        indented_lists,
    };
    let blocks = edit.blocks(0, lines.len(), key_col, true)?;
    edit.mapping(0..original.len(), &blocks, key_col, old, new, true)
}

/// Whether block lists sit two columns deeper than their key (`key:` / `  - item`) in `text`;
/// `None` when `text` has no block list under a key.
pub(crate) fn indented_lists(text: &str) -> Option<bool> {
    let lines = scan::lines(text)?;
    let content: Vec<&Line<'_>> = lines.iter().filter(|l| l.indent.is_some()).collect();
    content.windows(2).find_map(|pair| {
        let (key, next) = (pair[0], pair[1]);
        let (_, inline) = split_key(key.body)?;
        (inline.is_empty() && scan::is_dash(next.body)).then(|| next.indent > key.indent)
    })
}

/// One key of a block mapping: its lines from the key line to its last content line.
struct Block<'a> {
    key: &'a str,
    /// The value written on the key line (empty when it is on the lines below).
    inline: &'a str,
    first: usize,
    last: usize,
}

struct Edit<'a> {
    src: &'a str,
    lines: &'a [Line<'a>],
    indented_lists: bool,
}

impl<'a> Edit<'a> {
    /// The keys at column `key_col` among `lines[from..to]`; `dash_first` when the first line is
    /// the item's `- key: …` line.
    fn blocks(
        &self,
        from: usize,
        to: usize,
        key_col: usize,
        dash_first: bool,
    ) -> Option<Vec<Block<'a>>> {
        let mut blocks: Vec<Block<'a>> = Vec::new();
        for i in from..to {
            let line = &self.lines[i];
            let Some(mut col) = line.indent else {
                continue;
            };
            let mut body = line.body;
            if dash_first && i == from {
                body = body.strip_prefix('-')?.trim_start_matches(' ');
                col = key_col;
            }
            if col > key_col {
                blocks.last_mut()?.last = i;
            } else if col == key_col {
                let (key, inline) = split_key(body)?;
                if blocks.iter().any(|b| b.key == key) {
                    return None;
                }
                blocks.push(Block {
                    key,
                    inline,
                    first: i,
                    last: i,
                });
            } else {
                return None;
            }
        }
        Some(blocks)
    }

    /// The new text of `range`, a block mapping whose keys are `blocks` at column `key_col`.
    fn mapping(
        &self,
        range: std::ops::Range<usize>,
        blocks: &[Block<'_>],
        key_col: usize,
        old: &Mapping,
        new: &Mapping,
        dash_first: bool,
    ) -> Option<String> {
        let mut out = String::with_capacity(range.len() + 64);
        let mut cursor = range.start;
        for (n, block) in blocks.iter().enumerate() {
            let (start, end) = (self.lines[block.first].start, self.lines[block.last].end);
            out.push_str(&self.src[cursor..start]);
            cursor = end;
            let (was, now) = (old.get(block.key), new.get(block.key));
            if was == now {
                out.push_str(&self.src[start..end]);
                continue;
            }
            if n == 0 && dash_first {
                return None; // the `- ` line would need rewriting too
            }
            let Some(now) = now else {
                continue; // removed
            };
            match (was, now) {
                (Some(Value::Mapping(was)), Value::Mapping(now))
                    if block.inline.is_empty() && block.last > block.first && !now.is_empty() =>
                {
                    let inner = &self.lines[block.first + 1..=block.last];
                    let col = inner.iter().find_map(|l| l.indent)?;
                    if col <= key_col {
                        return None;
                    }
                    let children = self.blocks(block.first + 1, block.last + 1, col, false)?;
                    out.push_str(&self.mapping(start..end, &children, col, was, now, false)?);
                }
                _ => out.push_str(&self.entry(block.key, now, key_col)?),
            }
        }
        out.push_str(&self.src[cursor..range.end]);
        for (key, value) in new {
            // A key the text leaves out but `old` has (`namespace: default`) stays left out.
            let added = old.get(key) != Some(value);
            let key = key.as_str()?;
            if added && blocks.iter().all(|b| b.key != key) {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&self.entry(key, value, key_col)?);
            }
        }
        Some(out)
    }

    fn entry(&self, key: &str, value: &Value, indent: usize) -> Option<String> {
        render::entry(key, value, indent, self.indented_lists).ok()
    }
}

/// `(key, value on the line)` of a `key: value` line with a plain key; the value is empty when
/// only a comment follows the colon.
fn split_key(body: &str) -> Option<(&str, &str)> {
    let colon = body.find(':')?;
    let (key, rest) = (&body[..colon], &body[colon + 1..]);
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if key.is_empty() || !key.chars().all(plain) || key.starts_with('-') {
        return None;
    }
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let rest = rest.trim();
    Some((key, if rest.starts_with('#') { "" } else { rest }))
}
