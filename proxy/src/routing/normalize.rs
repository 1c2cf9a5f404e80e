//! Request path normalisation before routing (RFC 3986 §6.2.2): escaped unreserved characters
//! decoded, dot segments removed, and optionally slashes merged and escaped slashes decoded, so a
//! route is chosen on the path its backend will read, and that is the path forwarded.

use std::str::FromStr;

use bytes::Bytes;
use http::{uri::PathAndQuery, Uri};

/// How much of a request path is normalised; Istio's `meshConfig.pathNormalization` levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathNormalization {
    /// Paths are matched and forwarded exactly as the client sent them.
    None,
    /// RFC 3986: `%XX` of an unreserved character decoded, other escapes' hex upper-cased, `.`
    /// and `..` segments removed.
    Base,
    /// `Base`, and every run of slashes merged into one.
    #[default]
    MergeSlashes,
    /// `MergeSlashes`, with `%2F` and `%5C` first decoded to `/`, for backends that decode them.
    DecodeAndMergeSlashes,
}

impl FromStr for PathNormalization {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "base" => Ok(Self::Base),
            "merge_slashes" => Ok(Self::MergeSlashes),
            "decode_and_merge_slashes" => Ok(Self::DecodeAndMergeSlashes),
            _ => Err("expected none, base, merge_slashes or decode_and_merge_slashes".into()),
        }
    }
}

impl PathNormalization {
    fn merges(self) -> bool {
        matches!(self, Self::MergeSlashes | Self::DecodeAndMergeSlashes)
    }
}

/// Normalises the path of `uri` in place, keeping its query; a path already normal (the common
/// case, found in one pass without allocating) and a target that is not a path (`*`) are left
/// alone. Fails (the caller answers 400) only if the normal form is not a valid URI, which its
/// characters rule out; failing closed keeps an unnormalised path from reaching the routes.
pub fn normalize_path(uri: &mut Uri, mode: PathNormalization) -> Result<(), &'static str> {
    let path = uri.path();
    if mode == PathNormalization::None
        || !path.starts_with('/')
        || !may_change(path.as_bytes(), mode.merges())
    {
        return Ok(());
    }
    let normal = normalized(path, mode);
    if normal == path {
        return Ok(());
    }
    let pq = match uri.query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    const INVALID: &str = "the normalised path is not a valid URI";
    let pq = PathAndQuery::from_maybe_shared(Bytes::from(pq)).map_err(|_| INVALID)?;
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    *uri = Uri::from_parts(parts).map_err(|_| INVALID)?;
    Ok(())
}

/// Whether `path` holds an escape, a segment starting with `.`, or (when merging) `//`.
fn may_change(path: &[u8], merge: bool) -> bool {
    path.iter().enumerate().any(|(i, &b)| match b {
        b'%' => true,
        b'/' => match path.get(i + 1) {
            Some(b'.') => true,
            Some(b'/') => merge,
            _ => false,
        },
        _ => false,
    })
}

/// The normal form of `path`, which starts with `/`.
fn normalized(path: &str, mode: PathNormalization) -> String {
    let decoded = decode_escapes(path, mode == PathNormalization::DecodeAndMergeSlashes);
    let mut segments: Vec<&str> = Vec::new();
    // Whether the last segment was removed, which leaves the path ending in `/` (RFC 3986 5.2.4).
    let mut trailing = false;
    for segment in decoded[1..].split('/') {
        trailing = true;
        match segment {
            "." => {}
            ".." => {
                segments.pop();
            }
            "" if mode.merges() => {}
            kept => {
                segments.push(kept);
                trailing = false;
            }
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if trailing || out.is_empty() {
        out.push('/');
    }
    out
}

/// Decodes `%XX` escapes of unreserved characters (and of `/` and `\` when `slashes`, both to
/// `/`); other valid escapes keep their meaning with upper-case hex; a `%` not followed by two hex
/// digits is kept as it is.
fn decode_escapes(path: &str, slashes: bool) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = (b == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)? << 4) | hex(*bytes.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(c) if c.is_ascii_alphanumeric() || b"-._~".contains(&c) => out.push(char::from(c)),
            Some(b'/' | b'\\') if slashes => out.push('/'),
            Some(c) => out.push_str(&format!("%{c:02X}")),
            None => {
                // `path` is a `&str` and every other byte pushed is ASCII, so this copies a
                // whole character: the bytes up to the next ASCII one.
                let end = bytes[i + 1..]
                    .iter()
                    .position(|b| b.is_ascii())
                    .map_or(bytes.len(), |p| i + 1 + p);
                out.push_str(&path[i..end]);
                i = end;
                continue;
            }
        }
        i += 3;
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str, mode: PathNormalization) -> String {
        let mut uri: Uri = path.parse().expect("test uri");
        normalize_path(&mut uri, mode).expect("normalises");
        uri.to_string()
    }

    #[test]
    fn dot_segments_are_removed_as_rfc_3986_does() {
        // RFC 3986 5.2.4 and 5.4 examples, merged slashes aside.
        for (path, want) in [
            ("/a/b/c/./../../g", "/a/g"),
            ("/mid/content=5/../6", "/mid/6"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/a/..", "/"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a/./", "/a/"),
            ("/.", "/"),
            ("/", "/"),
            ("/a/b/", "/a/b/"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a/..b/.c", "/a/..b/.c"),
        ] {
            assert_eq!(norm(path, PathNormalization::Base), want, "{path}");
        }
    }

    #[test]
    fn base_keeps_empty_segments_and_merge_slashes_drops_them() {
        for (path, base, merged) in [
            ("//admin", "//admin", "/admin"),
            ("/a//b", "/a//b", "/a/b"),
            ("/a//..", "/a/", "/"),
            ("/a/.//b", "/a//b", "/a/b"),
            ("/a///", "/a///", "/a/"),
        ] {
            assert_eq!(norm(path, PathNormalization::Base), base, "{path}");
            assert_eq!(
                norm(path, PathNormalization::MergeSlashes),
                merged,
                "{path}"
            );
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded_and_others_upper_cased() {
        let m = PathNormalization::MergeSlashes;
        assert_eq!(norm("/%61dmin", m), "/admin");
        assert_eq!(norm("/x/%2e%2E/admin", m), "/admin");
        assert_eq!(norm("/%7euser/%2f%3a%20", m), "/~user/%2F%3A%20");
        assert_eq!(norm("/100%/%zz/%4", m), "/100%/%zz/%4");
        assert_eq!(norm("/%2F..%2Fadmin", m), "/%2F..%2Fadmin");
        let d = PathNormalization::DecodeAndMergeSlashes;
        assert_eq!(norm("/public%2F..%2Fadmin", d), "/admin");
        assert_eq!(norm("/a%5cb%5C%2f%2F", d), "/a/b/");
    }

    #[test]
    fn the_query_and_authority_are_kept_and_none_changes_nothing() {
        let m = PathNormalization::MergeSlashes;
        assert_eq!(norm("/a/../b?x=/../%2e&y", m), "/b?x=/../%2e&y");
        assert_eq!(
            norm("http://h.test:8080//a/./b?q", m),
            "http://h.test:8080/a/b?q"
        );
        assert_eq!(norm("/a/../b", PathNormalization::None), "/a/../b");
        assert_eq!(norm("*", m), "*");
    }

    #[test]
    fn normalising_twice_changes_nothing_more() {
        for path in ["/a/%2e%2e/b//c/.", "/%41%2f/x/../..", "//a/.//../b/"] {
            for mode in [
                PathNormalization::Base,
                PathNormalization::MergeSlashes,
                PathNormalization::DecodeAndMergeSlashes,
            ] {
                let once = norm(path, mode);
                assert_eq!(norm(&once, mode), once, "{path} {mode:?}");
            }
        }
    }

    #[test]
    fn levels_parse_by_name() {
        assert_eq!("BASE".parse(), Ok(PathNormalization::Base));
        assert_eq!(
            "decode_and_merge_slashes".parse(),
            Ok(PathNormalization::DecodeAndMergeSlashes)
        );
        assert!("merge".parse::<PathNormalization>().is_err());
    }
}
