//! mandate-core against Cedar on the same stream, in one run.
//!
//! Run inside `benches/cedar-compare`:
//! `cargo bench -- --warm-up-time 1 --measurement-time 3`
//!
//! Each criterion iteration replays the whole stream ([`STREAM_LEN`] requests) from empty
//! histories; the per-decision time is the iteration time divided by the stream length.
//! Both sides keep the history in Rust (`AgentHistory`, `history.record`); the Cedar side
//! also builds each request's context (amount, currency, category, recipient, the spends of
//! the day, the week and the month, requests in the last 60 s, now) before
//! `Authorizer::is_authorized`.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use cedar_compare::{
    AGENTS, CedarEngine, Rule, STREAM_LEN, agents, cedar_requests, mandate, mix, run_cedar,
    run_core, stream,
};
use criterion::{Criterion, Throughput};

const GROUP: &str = "decide_stream";

fn criterion_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion")
}

/// The mean time per iteration criterion just measured, in nanoseconds.
fn mean_ns(bench: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(GROUP)
        .join(bench)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn main() {
    let mandate = mandate();
    let items = stream();
    let engine = CedarEngine::new(&mandate, &agents());

    // The verdicts must agree before anything is timed.
    let core = run_core(&mandate, &items);
    let cedar = run_cedar(&engine, &items);
    for (i, (evaluation, rule)) in core.iter().zip(&cedar).enumerate() {
        assert_eq!(Rule::of_evaluation(evaluation), *rule, "request {i}");
    }
    println!(
        "stream: {STREAM_LEN} requests, {AGENTS} agents; identical verdicts; mix {:?}",
        mix(&cedar)
    );
    let requests = cedar_requests(&engine, &items);

    let mut c = Criterion::default()
        .output_directory(&criterion_dir())
        .configure_from_args();
    {
        let mut group = c.benchmark_group(GROUP);
        group.throughput(Throughput::Elements(STREAM_LEN as u64));
        group.sample_size(10);
        group.bench_function("mandate_core", |b| {
            b.iter(|| run_core(black_box(&mandate), black_box(&items)))
        });
        group.bench_function("cedar", |b| {
            b.iter(|| run_cedar(black_box(&engine), black_box(&items)))
        });
        group.bench_function("cedar_is_authorized_only", |b| {
            b.iter(|| {
                requests
                    .iter()
                    .map(|r| engine.decide(black_box(r)))
                    .filter(|r| *r == Rule::Allow)
                    .count()
            })
        });
        group.finish();
    }
    c.final_summary();

    let per = |bench: &str| mean_ns(bench).map(|ns| ns / STREAM_LEN as f64);
    if let (Some(core), Some(cedar)) = (per("mandate_core"), per("cedar")) {
        println!();
        println!("per decision (mean over {STREAM_LEN} requests, history bookkeeping included):");
        println!("  mandate-core evaluate + record : {core:>10.1} ns");
        println!(
            "  Cedar context + is_authorized + record : {:>10.1} ns",
            cedar
        );
        if let Some(only) = per("cedar_is_authorized_only") {
            println!("  Cedar is_authorized alone (prebuilt requests): {only:>10.1} ns");
        }
        println!("  ratio Cedar / mandate-core     : {:>10.0}x", cedar / core);
    } else {
        println!("(run the benches without a filter to get the ratio)");
    }
}
