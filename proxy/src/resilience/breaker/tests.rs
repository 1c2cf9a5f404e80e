//! Breaker behaviour under paused time: ejection, probing, doubling, the floor, success rate.

use std::sync::Mutex;

use super::*;
use crate::model::{CircuitBreakerPolicy, Dur, SuccessRate};

const SEC: Duration = Duration::from_secs(1);

fn policy(consecutive: Option<u32>) -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        consecutive_failures: consecutive,
        min_ejection: Some(Dur(SEC)),
        max_ejection: Some(Dur(8 * SEC)),
        ..Default::default()
    }
}

/// A breaker that records its transitions.
fn recorded(
    p: &CircuitBreakerPolicy,
    gate: Arc<EjectionGate>,
) -> (Arc<CircuitBreaker>, Arc<Mutex<Vec<Transition>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let observer: Observer = Arc::new(move |t| sink.lock().expect("test log").push(t));
    (
        CircuitBreaker::new(BreakerPolicy::new(p), gate, Some(observer)),
        log,
    )
}

fn fail(b: &Arc<CircuitBreaker>, n: u32) {
    for _ in 0..n {
        b.try_admit().expect("admitted").record(false);
    }
}

fn succeed(b: &Arc<CircuitBreaker>, n: u32) {
    for _ in 0..n {
        b.try_admit().expect("admitted").record(true);
    }
}

fn log(l: &Arc<Mutex<Vec<Transition>>>) -> Vec<Transition> {
    l.lock().expect("test log").clone()
}

#[tokio::test(start_paused = true)]
async fn consecutive_failures_eject_and_a_successful_probe_closes() {
    let (b, events) = recorded(&policy(Some(3)), EjectionGate::new(3, 1));
    fail(&b, 2);
    assert_eq!(b.state(), State::Closed);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open);
    assert!(b.try_admit().is_none());

    tokio::time::advance(SEC).await;
    assert_eq!(b.state(), State::HalfOpen);
    let probe = b.try_admit().expect("the probe");
    assert!(probe.is_probe());
    assert!(b.try_admit().is_none(), "one probe at a time");
    probe.record(true);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        log(&events),
        [
            Transition::Ejected(SEC),
            Transition::Probing,
            Transition::Closed
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_success_between_failures_resets_the_count() {
    let (b, _) = recorded(&policy(Some(3)), EjectionGate::new(3, 1));
    for _ in 0..5 {
        fail(&b, 2);
        succeed(&b, 1);
    }
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn each_failed_probe_doubles_the_ejection_up_to_the_maximum() {
    let (b, events) = recorded(&policy(Some(1)), EjectionGate::new(3, 1));
    fail(&b, 1);
    let mut ejections = vec![];
    for _ in 0..5 {
        let Transition::Ejected(d) = *log(&events).last().expect("an event") else {
            panic!("not ejected: {:?}", log(&events));
        };
        ejections.push(d);
        tokio::time::advance(d - Duration::from_millis(1)).await;
        assert!(b.try_admit().is_none(), "still ejected just before {d:?}");
        tokio::time::advance(Duration::from_millis(1)).await;
        b.try_admit().expect("the probe").record(false);
    }
    assert_eq!(ejections, [SEC, 2 * SEC, 4 * SEC, 8 * SEC, 8 * SEC]);

    tokio::time::advance(8 * SEC).await;
    b.try_admit().expect("the probe").record(true);
    fail(&b, 1);
    assert_eq!(
        log(&events).last(),
        Some(&Transition::Ejected(SEC)),
        "a successful probe resets the doubling"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_lets_the_next_request_probe() {
    let (b, _) = recorded(&policy(Some(1)), EjectionGate::new(3, 1));
    fail(&b, 1);
    tokio::time::advance(SEC).await;
    drop(b.try_admit().expect("the probe"));
    assert!(b.is_available());
    assert!(b.try_admit().expect("a new probe").is_probe());
}

#[tokio::test(start_paused = true)]
async fn results_of_requests_admitted_before_the_ejection_are_ignored() {
    let (b, events) = recorded(&policy(Some(2)), EjectionGate::new(3, 1));
    let late = b.try_admit().expect("admitted");
    fail(&b, 2);
    late.record(false);
    assert_eq!(
        log(&events),
        [Transition::Ejected(SEC)],
        "no second ejection"
    );
    tokio::time::advance(SEC).await;
    assert!(b.try_admit().is_some());
}

#[tokio::test(start_paused = true)]
async fn ejection_is_refused_when_it_would_leave_fewer_ready_endpoints_than_the_floor() {
    let gate = EjectionGate::new(3, 2);
    let (a, _) = recorded(&policy(Some(1)), Arc::clone(&gate));
    let (b, b_events) = recorded(&policy(Some(1)), Arc::clone(&gate));
    fail(&a, 1);
    assert_eq!(a.state(), State::Open);
    fail(&b, 1);
    assert_eq!(b.state(), State::Closed, "two of three must stay ready");
    assert_eq!(log(&b_events), [Transition::EjectionRefused]);
    assert_eq!(gate.ejected(), 1);

    tokio::time::advance(SEC).await;
    a.try_admit().expect("probe").record(true);
    assert_eq!(gate.ejected(), 0);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open, "the place is free again");
}

#[tokio::test(start_paused = true)]
async fn an_ejected_breaker_that_is_dropped_gives_its_place_back() {
    let gate = EjectionGate::new(2, 1);
    let (a, _) = recorded(&policy(Some(1)), Arc::clone(&gate));
    fail(&a, 1);
    assert_eq!(gate.ejected(), 1);
    drop(a);
    assert_eq!(gate.ejected(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_low_success_rate_ejects_once_the_window_holds_enough_requests() {
    let p = CircuitBreakerPolicy {
        success_rate: Some(SuccessRate {
            threshold: 0.8,
            window: Dur(10 * SEC),
            min_requests: 10,
        }),
        ..policy(None)
    };
    let (b, _) = recorded(&p, EjectionGate::new(3, 1));
    // Alternating: never two failures in a row, 50% success.
    for _ in 0..4 {
        fail(&b, 1);
        succeed(&b, 1);
    }
    fail(&b, 1);
    assert_eq!(b.state(), State::Closed, "9 requests: below minRequests");
    succeed(&b, 1);
    fail(&b, 1);
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn failures_that_age_out_of_the_window_do_not_count() {
    let p = CircuitBreakerPolicy {
        success_rate: Some(SuccessRate {
            threshold: 0.7,
            window: Dur(10 * SEC),
            min_requests: 4,
        }),
        ..policy(None)
    };
    let (b, _) = recorded(&p, EjectionGate::new(3, 1));
    fail(&b, 1);
    succeed(&b, 1);
    fail(&b, 1);
    tokio::time::advance(11 * SEC).await;
    succeed(&b, 3);
    fail(&b, 1);
    assert_eq!(
        b.state(),
        State::Closed,
        "3 of 4 in the window succeeded (4 of 7 had the old ones counted)"
    );
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_on_one_route_leaves_the_others_alone() {
    let (api, _) = recorded(&policy(Some(1)), EjectionGate::unbounded());
    let (web, _) = recorded(&policy(Some(1)), EjectionGate::unbounded());
    fail(&api, 1);
    assert_eq!(api.state(), State::Open, "a route's gate has no floor");
    assert_eq!(web.state(), State::Closed);
}

#[test]
fn policy_defaults_follow_linkerd() {
    let p = BreakerPolicy::new(&CircuitBreakerPolicy::default());
    assert_eq!(p.consecutive, Some(DEFAULT_CONSECUTIVE_FAILURES));
    assert_eq!(p.ejection(0), DEFAULT_MIN_EJECTION);
    assert_eq!(p.ejection(30), DEFAULT_MAX_EJECTION);
    assert_eq!(p.min_ready, 1);
    let only_rate = CircuitBreakerPolicy {
        success_rate: Some(SuccessRate {
            threshold: 0.9,
            window: Dur(SEC),
            min_requests: 0,
        }),
        ..Default::default()
    };
    let p = BreakerPolicy::new(&only_rate);
    assert_eq!(
        p.consecutive, None,
        "a success-rate policy alone does not add a streak trigger"
    );
    assert_eq!(p.success_rate, Some((0.9, SEC, DEFAULT_MIN_REQUESTS)));
}
