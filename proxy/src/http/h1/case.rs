//! How header names are spelled on the HTTP/1 wire: lower case (what HTTP/2 requires and the
//! `http` crate keeps), or Title-Case for applications that compare names case-sensitively.

use std::str::FromStr;

/// `WEIR_PROXY_HTTP1_HEADER_CASE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderCase {
    /// `content-type`, `x-request-id`.
    #[default]
    Lower,
    /// `Content-Type`, `X-Request-Id`: each word's first letter upper case, as Go's canonical
    /// form and hyper's `title_case_headers` spell them.
    Title,
}

impl FromStr for HeaderCase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "lower" => Ok(Self::Lower),
            "title" => Ok(Self::Title),
            _ => Err("expected lower or title".into()),
        }
    }
}

impl HeaderCase {
    /// Appends `name` (lower case, as `http` keeps names) spelled in this case.
    #[inline]
    pub fn write(self, name: &str, out: &mut Vec<u8>) {
        match self {
            HeaderCase::Lower => out.extend_from_slice(name.as_bytes()),
            HeaderCase::Title => {
                let mut word_start = true;
                out.extend(name.bytes().map(|b| {
                    let c = if word_start {
                        b.to_ascii_uppercase()
                    } else {
                        b
                    };
                    word_start = b == b'-';
                    c
                }));
            }
        }
    }

    /// One of a fixed line's two spellings.
    #[inline]
    pub fn pick(self, lower: &'static [u8], title: &'static [u8]) -> &'static [u8] {
        match self {
            HeaderCase::Lower => lower,
            HeaderCase::Title => title,
        }
    }

    /// For hyper's HTTP/1 builders (`title_case_headers`), which write the rest.
    pub fn is_title(self) -> bool {
        self == HeaderCase::Title
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderCase;

    #[test]
    fn title_case_upper_cases_each_word_and_lower_case_leaves_names_alone() {
        for (name, title) in [
            ("content-type", "Content-Type"),
            ("x-request-id", "X-Request-Id"),
            ("www-authenticate", "Www-Authenticate"),
            ("te", "Te"),
            ("x--a", "X--A"),
            ("-a", "-A"),
        ] {
            let mut out = Vec::new();
            HeaderCase::Title.write(name, &mut out);
            assert_eq!(out, title.as_bytes());
            out.clear();
            HeaderCase::Lower.write(name, &mut out);
            assert_eq!(out, name.as_bytes());
        }
        assert_eq!("Title".parse(), Ok(HeaderCase::Title));
        assert!("preserve".parse::<HeaderCase>().is_err());
    }
}
