//! Finds where a node sits in the registry text. serde_yaml has no spans, but every error it raises
//! carries the position of the node being read; so we walk to the node along its path and fail on
//! purpose there, or deserialize just that node to collect its own error.

use std::{fmt, marker::PhantomData};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::model::{Route, Service};

/// One step of a path through the document, spelled as in the YAML (camelCase keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seg {
    Key(&'static str),
    Index(usize),
}

/// `services[0].endpoints[1].weight`, the same spelling serde_yaml uses in its messages.
pub(super) fn display_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The 1-based (line, column) of the node at `path`, or of its nearest existing ancestor when the
/// node itself is absent (a defaulted field). Scalars resolve to their first character, mappings
/// and lists to their first key or item.
pub(super) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    (0..=path.len()).rev().find_map(|len| {
        let seek = Seek {
            path: &path[..len],
            target: Here,
        };
        match seek.deserialize(serde_yaml::Deserializer::from_str(text)) {
            Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
            _ => None,
        }
    })
}

/// After the whole-document parse failed with `first`, re-reads each service and gateway route on
/// its own so one bad item does not hide the errors in the others.
pub(super) fn structural_errors(text: &str, first: serde_yaml::Error) -> Vec<serde_yaml::Error> {
    let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return vec![first]; // a syntax error: nothing further can be read reliably
    };
    let count = |v: Option<&serde_yaml::Value>| v.and_then(|v| v.as_sequence()).map_or(0, Vec::len);
    let services = count(doc.get("services"));
    let routes = count(doc.get("gateway").and_then(|g| g.get("routes")));
    let mut errors = vec![first];
    for i in 0..services {
        let path = [Seg::Key("services"), Seg::Index(i)];
        errors.extend(item_error::<Service>(text, &path));
    }
    for i in 0..routes {
        let path = [Seg::Key("gateway"), Seg::Key("routes"), Seg::Index(i)];
        errors.extend(item_error::<Route>(text, &path));
    }
    errors
}

fn item_error<T: de::DeserializeOwned>(text: &str, path: &[Seg]) -> Option<serde_yaml::Error> {
    let seek = Seek {
        path,
        target: PhantomData::<T>,
    };
    seek.deserialize(serde_yaml::Deserializer::from_str(text))
        .err()
}

/// Marks the error `Here` raises, so it is not mistaken for the document not fitting the path.
const HERE: &str = "\u{0}weir-locate-here";

/// Accepts nothing: whatever node it is asked to read becomes an error at that node's position.
#[derive(Clone, Copy)]
struct Here;

impl<'de> Visitor<'de> for Here {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HERE)
    }
}

impl<'de> DeserializeSeed<'de> for Here {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Walks `path`, skipping everything beside it, and reads the node at its end with `target`.
/// `Ok(None)`: the path does not exist in this document.
struct Seek<'p, S> {
    path: &'p [Seg],
    target: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seek<'_, S> {
    type Value = Option<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.path.split_first() {
            None => self.target.deserialize(d).map(Some),
            Some((Seg::Key(_), _)) => d.deserialize_map(self),
            Some((Seg::Index(_), _)) => d.deserialize_seq(self),
        }
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Seek<'_, S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping or a list on the way to a registry node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (Some((Seg::Key(want), rest)), mut target) =
            (self.path.split_first(), Some(self.target))
        else {
            return Ok(None);
        };
        let mut found = None;
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            match target.take() {
                Some(t) if key.as_str() == Some(*want) => {
                    found = map.next_value_seed(Seek {
                        path: rest,
                        target: t,
                    })?;
                }
                t => {
                    target = t;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Some((Seg::Index(want), rest)) = self.path.split_first() else {
            return Ok(None);
        };
        for _ in 0..*want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(None);
            }
        }
        let found = seq
            .next_element_seed(Seek {
                path: rest,
                target: self.target,
            })?
            .flatten();
        // serde_yaml insists a list is read to its end.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(found)
    }
}
