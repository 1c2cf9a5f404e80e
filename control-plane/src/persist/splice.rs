//! Edits the registry file's text in place: a replaced item is rewritten where it stands (only its
//! changed keys, see `refine`, or whole), new items go at the end of their list, and every other
//! byte (comments, order, quoting) is kept.

use std::ops::Range;

use serde::Serialize;
use weir_proxy::model::Registry;

use super::{
    refine, render,
    scan::{self, ListSpot},
    PersistError,
};

/// Which items of the merged registry differ from the file: indexes into `merged`'s lists.
#[derive(Debug, Default)]
pub(crate) struct Touched {
    /// Services replaced in place (indexes shared by the file and `merged`).
    pub services_replaced: Vec<usize>,
    /// Services added at the end of `merged.services`.
    pub services_added: Vec<usize>,
    /// Gateway routes replaced in place.
    pub routes_replaced: Vec<usize>,
    /// Gateway routes added at the end of `merged.gateway.routes`.
    pub routes_added: Vec<usize>,
}

/// Why the text could not be edited in place.
#[derive(Debug)]
pub(crate) enum Unspliceable {
    /// The file is not laid out in a way the line scanner follows.
    Layout(&'static str),
    /// Rendering failed.
    Render(PersistError),
}

impl From<PersistError> for Unspliceable {
    fn from(e: PersistError) -> Self {
        Unspliceable::Render(e)
    }
}

/// How much of a changed item is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grain {
    /// Only the keys whose value changed (see `refine`); the whole item where that cannot be done.
    Keys,
    /// The whole item.
    Item,
}

/// `text` (whose registry is `base`) with the touched items of `merged` written in.
pub(crate) fn splice(
    text: &str,
    base: &Registry,
    merged: &Registry,
    touched: &Touched,
    grain: Grain,
) -> Result<String, Unspliceable> {
    let file_lists = refine::indented_lists(text).unwrap_or(false);
    let style = Style { grain, file_lists };
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let services = List {
        path: &["services"],
        base_len: base.services.len(),
        replaced: &touched.services_replaced,
        added: &touched.services_added,
    };
    services.edits(text, &mut edits, |i, indent, original| {
        style.item(base.services.get(i), &merged.services[i], indent, original)
    })?;
    let routes = List {
        path: &["gateway", "routes"],
        base_len: base.gateway.routes.len(),
        replaced: &touched.routes_replaced,
        added: &touched.routes_added,
    };
    routes.edits(text, &mut edits, |i, indent, original| {
        style.item(
            base.gateway.routes.get(i),
            &merged.gateway.routes[i],
            indent,
            original,
        )
    })?;
    // Stable sort, applied back to front: of two inserts at one spot, the first pushed ends up first.
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = text.to_string();
    for (range, mut replacement) in edits.into_iter().rev() {
        if range.start == out.len() && !out.is_empty() && !out.ends_with('\n') {
            replacement.insert(0, '\n');
        }
        out.replace_range(range, &replacement);
    }
    Ok(out)
}

struct Style {
    grain: Grain,
    /// Whether the file puts block lists two columns deeper than their key.
    file_lists: bool,
}

impl Style {
    /// The text of `new`, an item at column `indent`; `original` is the text of the item it
    /// replaces (`old` in the file), `None` for a new item.
    fn item<T: Serialize>(
        &self,
        old: Option<&T>,
        new: &T,
        indent: usize,
        original: Option<&str>,
    ) -> Result<String, PersistError> {
        let lists = original
            .and_then(refine::indented_lists)
            .unwrap_or(self.file_lists);
        if let (Some(old), Some(original), Grain::Keys) = (old, original, self.grain) {
            let (old, new_value) = (render::value(old)?, render::value(new)?);
            if let Some(text) = refine::item(original, &old, &new_value, lists) {
                return Ok(text);
            }
        }
        render::item(new, indent, lists)
    }
}

struct List<'a> {
    path: &'a [&'a str],
    base_len: usize,
    replaced: &'a [usize],
    added: &'a [usize],
}

impl List<'_> {
    fn edits(
        &self,
        text: &str,
        edits: &mut Vec<(Range<usize>, String)>,
        render: impl Fn(usize, usize, Option<&str>) -> Result<String, PersistError>,
    ) -> Result<(), Unspliceable> {
        if self.replaced.is_empty() && self.added.is_empty() {
            return Ok(());
        }
        let spot = scan::find_list(text, self.path).ok_or(Unspliceable::Layout(
            "a list is not written in block style (`- item` lines)",
        ))?;
        let new_items = |indent: usize| -> Result<String, PersistError> {
            self.added
                .iter()
                .map(|&i| render(i, indent, None))
                .collect()
        };
        let key = self.path.last().copied().unwrap_or_default();
        match spot {
            ListSpot::Block(list) => {
                if list.items.len() != self.base_len {
                    return Err(Unspliceable::Layout(
                        "the list's items could not be told apart line by line",
                    ));
                }
                for &i in self.replaced {
                    let range = list.items[i].clone();
                    let new = render(i, list.indent, Some(&text[range.clone()]))?;
                    edits.push((range, new));
                }
                let at = list.append_at;
                edits.push((at..at, new_items(list.indent)?));
            }
            ListSpot::EmptyFlow { line, key_indent } => {
                let head = format!("{}{key}:\n", " ".repeat(key_indent));
                edits.push((line, head + &new_items(key_indent + 2)?));
            }
            ListSpot::Missing {
                parent_end: Some(at),
                indent,
            } => {
                let head = format!("{}{key}:\n", " ".repeat(indent));
                edits.push((at..at, head + &new_items(indent + 2)?));
            }
            ListSpot::Missing {
                parent_end: None, ..
            } => {
                let mut head = String::new();
                for (depth, k) in self.path.iter().enumerate() {
                    head.push_str(&format!("{}{k}:\n", " ".repeat(depth * 2)));
                }
                let at = text.len();
                edits.push((at..at, head + &new_items(self.path.len() * 2)?));
            }
        }
        Ok(())
    }
}
