#!/usr/bin/env python3
"""wakeups.py - what one proxy's CPU does per wake-up at a fixed rate, from an ftrace text trace
(sched_waking, sched_wakeup, sched_switch; peers.sh's trace phase records it).

For the proxy's threads (PIDS) on its CPU (CPU): runs per request (each from a wake-up to
sleeping again); how long a run lasts (its work and the kernel's, socket delivery to the peer
included); and the time from a remote CPU's sched_waking to the wake-up on the proxy's CPU (the
IPI and the vCPU's resume: a halted vCPU waits for the hypervisor). Steal lengthens both for
every proxy alike. This kernel traces no switch from the idle task, so a run starts at the
wake-up that the idle CPU's interrupt handler traces.

usage: wakeups.py TRACE CPU REQUESTS PID... -> one CSV line:
       runs_per_req,busy_p50_us,busy_p99_us,busy_mean_us,ipi_p50_us,ipi_p99_us
"""
import re
import sys

LINE = re.compile(r"^\s*.+?-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+): (\w+): (.*)$")
PID = re.compile(r"\bpid=(\d+)")
PREV = re.compile(r"prev_pid=(\d+)")


def pct(xs, f):
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else 0.0


def main():
    trace, cpu, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    pids = set(sys.argv[4:])
    waking = None  # when a remote CPU first asked to wake a sleeping proxy thread
    start = None  # when the thread woke on its CPU
    busy, ipi = [], []
    with open(trace) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            running, on, t, ev, rest = m.group(1), int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
            if start is None and on == cpu and running in pids:
                # Running without a traced wake-up: woken while still switching out, so it
                # never slept (no IPI); the segment is counted from its first event.
                start, waking = t, None
            if ev == "sched_waking" and start is None and waking is None:
                p = PID.search(rest)
                if p and p.group(1) in pids:
                    waking = t
            elif ev == "sched_wakeup" and on == cpu and start is None:
                p = PID.search(rest)
                if p and p.group(1) in pids:
                    start = t
                    if waking is not None:
                        ipi.append((t - waking) * 1e6)
                    waking = None
            elif ev == "sched_switch" and on == cpu:
                p = PREV.search(rest)
                if p and p.group(1) in pids:
                    if start is not None:
                        busy.append((t - start) * 1e6)
                    start = waking = None
    busy.sort()
    ipi.sort()
    per_req = len(busy) / max(1, requests)  # the trace spans the load window only
    mean = sum(busy) / len(busy) if busy else 0
    print(f"{per_req:.3f},{pct(busy, .5):.1f},{pct(busy, .99):.1f},{mean:.1f},{pct(ipi, .5):.1f},{pct(ipi, .99):.1f}")


if __name__ == "__main__":
    main()
