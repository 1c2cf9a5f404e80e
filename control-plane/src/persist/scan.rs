//! Finds a block-style list in registry YAML (`services:` or `gateway:` → `routes:`) and the byte
//! range of each of its items, so one item can be replaced without touching the bytes around it.
//! A line scanner, not a YAML parser: anything it is unsure of is `None`, and the caller falls
//! back to re-rendering (every spliced text is re-parsed before it is trusted anyway).

use std::ops::Range;

/// Where a list sits in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListSpot {
    /// A block list (possibly with no items yet).
    Block(BlockList),
    /// `key: []` on one line: that line is replaced by a block list.
    EmptyFlow {
        /// The whole line, newline included.
        line: Range<usize>,
        /// Column of the key.
        key_indent: usize,
    },
    /// The key is absent. For a nested key, `parent_end` is where the parent mapping's content
    /// ends and `indent` the column of its keys; `None` when the parent is absent too.
    Missing {
        /// End of the parent mapping's last content line (nested keys only).
        parent_end: Option<usize>,
        /// Column for the new key.
        indent: usize,
    },
}

/// A block list's items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockList {
    /// Column of the items' `-`.
    pub indent: usize,
    /// Each item: from the start of its `-` line to the end of its last content line (comments
    /// and blank lines after it stay outside, with whatever follows).
    pub items: Vec<Range<usize>>,
    /// Where a new item is inserted.
    pub append_at: usize,
}

/// One line of the text, located by byte offsets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Line<'a> {
    /// Offset of its first byte.
    pub start: usize,
    /// Offset just past its newline (or the end of the text).
    pub end: usize,
    /// Leading spaces; `None` for blank and comment-only lines.
    pub indent: Option<usize>,
    /// The line without its leading spaces and line break.
    pub body: &'a str,
}

/// The lines of `text`, or `None` when one is indented with a tab (which YAML forbids).
pub(super) fn lines(text: &str) -> Option<Vec<Line<'_>>> {
    let mut out = Vec::new();
    let mut start = 0;
    for raw in text.split_inclusive('\n') {
        let end = start + raw.len();
        let content = raw.trim_end_matches(['\n', '\r']);
        let body = content.trim_start_matches(' ');
        if body.starts_with('\t') {
            return None;
        }
        let indent =
            (!body.is_empty() && !body.starts_with('#')).then(|| content.len() - body.len());
        out.push(Line {
            start,
            end,
            indent,
            body,
        });
        start = end;
    }
    Some(out)
}

/// The value after `key:` on a line that starts with it, or `None` if the line is another key.
fn key_value<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let rest = body.strip_prefix(key)?.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let rest = rest.trim();
    Some(if rest.starts_with('#') { "" } else { rest })
}

/// Whether a line's body starts a list item.
pub(super) fn is_dash(body: &str) -> bool {
    body == "-" || body.starts_with("- ")
}

/// Locates the list at `path` (`["services"]` or `["gateway", "routes"]`).
pub(crate) fn find_list(text: &str, path: &[&str]) -> Option<ListSpot> {
    let lines = lines(text)?;
    for (i, l) in lines.iter().enumerate() {
        let marker = l.body.starts_with("---") || l.body.starts_with("...");
        let leading = lines[..i].iter().all(|p| p.indent.is_none());
        if l.indent == Some(0) && marker && !leading {
            return None; // several documents
        }
        if l.indent == Some(0) && (l.body.starts_with('{') || l.body.starts_with('[')) {
            return None; // a flow-style top level
        }
    }
    let top: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            let b = lines[i].body;
            lines[i].indent == Some(0) && !b.starts_with("---") && !is_dash(b)
        })
        .collect();
    find_in(&lines, &top, 0, lines.len(), path)
}

/// `keys`: indexes of the mapping's key lines (all at `indent`) within `lines[from..to]`.
fn find_in(
    lines: &[Line<'_>],
    keys: &[usize],
    indent: usize,
    to: usize,
    path: &[&str],
) -> Option<ListSpot> {
    let (key, rest) = path.split_first()?;
    let Some(pos) = keys
        .iter()
        .position(|&k| key_value(lines[k].body, key).is_some())
    else {
        return Some(ListSpot::Missing {
            parent_end: None,
            indent,
        });
    };
    let at = keys[pos];
    let end = keys.get(pos + 1).copied().unwrap_or(to);
    let value = key_value(lines[at].body, key)?;
    let inner: Vec<usize> = (at + 1..end)
        .filter(|&i| lines[i].indent.is_some())
        .collect();
    if rest.is_empty() {
        return match value {
            "" => block_list(lines, &inner, at, indent),
            "[]" => Some(ListSpot::EmptyFlow {
                line: lines[at].start..lines[at].end,
                key_indent: indent,
            }),
            _ => None,
        };
    }
    if !value.is_empty() {
        return None; // `gateway: {…}` or similar
    }
    let child_indent = inner
        .first()
        .and_then(|&i| lines[i].indent)
        .unwrap_or(indent + 2);
    if child_indent <= indent && !inner.is_empty() {
        return None;
    }
    let child_keys: Vec<usize> = inner
        .iter()
        .copied()
        .filter(|&i| lines[i].indent == Some(child_indent) && !is_dash(lines[i].body))
        .collect();
    match find_in(lines, &child_keys, child_indent, end, rest)? {
        ListSpot::Missing { .. } => Some(ListSpot::Missing {
            parent_end: Some(inner.last().map_or(lines[at].end, |&i| lines[i].end)),
            indent: child_indent,
        }),
        found => Some(found),
    }
}

fn block_list(lines: &[Line<'_>], inner: &[usize], key: usize, indent: usize) -> Option<ListSpot> {
    let Some(&first) = inner.first() else {
        return Some(ListSpot::Block(BlockList {
            indent: indent + 2,
            items: Vec::new(),
            append_at: lines[key].end,
        }));
    };
    let item_indent = lines[first].indent?;
    if item_indent < indent || !is_dash(lines[first].body) {
        return None;
    }
    let mut items: Vec<Range<usize>> = Vec::new();
    for &i in inner {
        let l = &lines[i];
        let ind = l.indent?;
        if ind == item_indent && is_dash(l.body) {
            items.push(l.start..l.end);
        } else if ind > item_indent {
            items.last_mut()?.end = l.end;
        } else {
            return None; // dedented content inside what should be the list
        }
    }
    let append_at = items.last()?.end;
    Some(ListSpot::Block(BlockList {
        indent: item_indent,
        items,
        append_at,
    }))
}
