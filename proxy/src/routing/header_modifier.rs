//! The `RequestHeaderModifier` and `ResponseHeaderModifier` filters: set, then add, then remove.

use http::HeaderMap;

use crate::model::HeaderModifier;

/// Applies `set` (replacing every existing value), then `add` (appending), then `remove`, in the
/// order the Gateway API lists the fields; a name both added and removed ends up removed.
pub(super) fn apply(modifier: &HeaderModifier, headers: &mut HeaderMap) {
    for pair in &modifier.set {
        headers.insert(pair.name.0.clone(), pair.value.0.clone());
    }
    for pair in &modifier.add {
        headers.append(pair.name.0.clone(), pair.value.0.clone());
    }
    for name in &modifier.remove {
        headers.remove(&name.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::test_support::headers;

    fn modifier(yaml: &str) -> HeaderModifier {
        serde_yaml::from_str(yaml).expect("test header modifier")
    }

    fn values<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a str> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ascii"))
            .collect()
    }

    #[test]
    fn set_replaces_every_existing_value() {
        let mut h = headers(&[("x-a", "1"), ("x-a", "2")]);
        apply(&modifier("set: [{ name: X-A, value: '3' }]"), &mut h);
        assert_eq!(values(&h, "x-a"), ["3"]);
    }

    #[test]
    fn add_appends_to_existing_values() {
        let mut h = headers(&[("x-a", "1")]);
        apply(
            &modifier("add: [{ name: x-a, value: '2' }, { name: x-b, value: '3' }]"),
            &mut h,
        );
        assert_eq!(values(&h, "x-a"), ["1", "2"]);
        assert_eq!(values(&h, "x-b"), ["3"]);
    }

    #[test]
    fn remove_drops_all_values_case_insensitively() {
        let mut h = headers(&[("x-a", "1"), ("x-a", "2"), ("x-keep", "k")]);
        apply(&modifier("remove: [X-A, x-absent]"), &mut h);
        assert!(!h.contains_key("x-a"));
        assert_eq!(values(&h, "x-keep"), ["k"]);
    }

    #[test]
    fn set_comes_before_add_and_remove_comes_last() {
        let mut h = headers(&[("x-a", "0"), ("x-gone", "0")]);
        let m = modifier("{ set: [{ name: x-a, value: '1' }], add: [{ name: x-a, value: '2' }, { name: x-gone, value: '1' }], remove: [x-gone] }");
        apply(&m, &mut h);
        assert_eq!(values(&h, "x-a"), ["1", "2"]);
        assert!(!h.contains_key("x-gone"));
    }
}
