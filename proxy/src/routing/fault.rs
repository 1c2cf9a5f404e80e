//! The `Fault` filter: abort a share of requests with a status, or delay a share of them.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode};

use crate::model::Fault;

/// What one `Fault` filter decided for one request.
#[derive(Debug)]
pub(super) enum Decision {
    Abort(Response<()>),
    Delay(Duration),
    Pass,
}

/// Draws `rng_percent` (a value in `[0, 100)`) once for the abort, if configured, then once for the
/// delay; an abort wins and skips the delay draw. A percentage of 100 always fires, 0 never.
pub(super) fn decide(fault: &Fault, rng_percent: &mut impl FnMut() -> f64) -> Decision {
    if let Some(abort) = &fault.abort {
        if rng_percent() < abort.percentage {
            let mut response = Response::new(());
            *response.status_mut() =
                StatusCode::from_u16(abort.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            response.headers_mut().insert(
                super::PROXY_ERROR,
                HeaderValue::from_static("fault-injected"),
            );
            return Decision::Abort(response);
        }
    }
    match &fault.delay {
        Some(delay) if rng_percent() < delay.percentage => Decision::Delay(delay.duration.0),
        _ => Decision::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(yaml: &str) -> Fault {
        serde_yaml::from_str(yaml).expect("test fault")
    }

    fn draws(values: &[f64]) -> impl FnMut() -> f64 + '_ {
        let mut it = values.iter().copied();
        move || it.next().expect("the test supplied too few draws")
    }

    #[test]
    fn abort_fires_when_the_draw_is_below_the_percentage() {
        let f = fault("abort: { percentage: 10, status: 503 }");
        let Decision::Abort(response) = decide(&f, &mut draws(&[9.99])) else {
            panic!("expected an abort")
        };
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers()[super::super::PROXY_ERROR],
            "fault-injected"
        );
        assert!(matches!(decide(&f, &mut draws(&[10.0])), Decision::Pass));
    }

    #[test]
    fn delay_fires_when_the_draw_is_below_the_percentage() {
        let f = fault("delay: { percentage: 5, duration: 100ms }");
        assert!(
            matches!(decide(&f, &mut draws(&[4.0])), Decision::Delay(d) if d == Duration::from_millis(100))
        );
        assert!(matches!(decide(&f, &mut draws(&[5.0])), Decision::Pass));
    }

    #[test]
    fn abort_is_drawn_first_and_wins_over_delay() {
        let f = fault(
            "{ abort: { percentage: 50, status: 500 }, delay: { percentage: 50, duration: 1s } }",
        );
        assert!(matches!(decide(&f, &mut draws(&[1.0])), Decision::Abort(_)));
        assert!(matches!(
            decide(&f, &mut draws(&[60.0, 1.0])),
            Decision::Delay(_)
        ));
    }

    #[test]
    fn zero_percent_never_fires_and_hundred_always_does() {
        let never = fault(
            "{ abort: { percentage: 0, status: 500 }, delay: { percentage: 0, duration: 1s } }",
        );
        assert!(matches!(
            decide(&never, &mut draws(&[0.0, 0.0])),
            Decision::Pass
        ));
        let always = fault("abort: { percentage: 100, status: 500 }");
        assert!(matches!(
            decide(&always, &mut draws(&[99.999])),
            Decision::Abort(_)
        ));
    }
}
