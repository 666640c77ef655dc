//! docs/performance.md's table of figures, drawn from the records of the sittings that
//! measured them. Each line names what is measured, the machine and the command; its value
//! comes from the records below, each number to the decimals its record writes. Older
//! records state a sitting's range or list rather than a line a run, and
//! `2026-11-27-performance-figures.tsv` holds the figures that other records kept only in
//! their notes' prose: [`Range::of`] reads those values too.

use std::fmt::Write as _;

use super::{Range, Run, number, runs};
use crate::error::{Error, Result};

/// The page the table goes in, between `<!-- figures: performance -->` and its end marker.
pub(crate) const PAGE: &str = "docs/performance.md";

/// SQLite on the AMD EPYC machine: the request's futures made small (build 79d02c7).
const SMALL_FUTURES: &str = "2026-11-26-small-futures-sqlite.tsv";
/// SQLite on the AMD EPYC machine: five builds, bytes a decision with the log's rounds and
/// without.
const FIVE_BUILDS: &str = "2026-11-25-five-builds-sqlite.tsv";
/// Instructions a decision counted by callgrind, of the present build.
const INSTRUCTIONS: &str = "2026-11-27-instructions-sqlite.tsv";
/// PostgreSQL with one server process.
const ONE_PROCESS: &str = "2026-11-26-postgres-one-process.tsv";
/// The earlier machine's sitting, stated as a figure a line.
const TARGETS: &str = "2026-11-23-sqlite-targets.tsv";
/// Figures the other records keep only in their notes, stated as a figure a line.
const STATED: &str = "2026-11-27-performance-figures.tsv";

/// The machine of the present figures.
const EPYC: &str = "AMD EPYC";
/// The machine figures were last measured on before it.
const EARLIER: &str = "earlier machine";

/// One record's runs, with its name to say which record lacks what.
struct Record {
    name: &'static str,
    runs: Vec<Run>,
}

impl Record {
    /// The record `name`, its text given by `read`.
    fn read(name: &'static str, read: &impl Fn(&str) -> Result<String>) -> Result<Self> {
        let runs = runs(&read(name)?).map_err(|e| format!("{name}: {e}"))?;
        Ok(Self { name, runs })
    }

    /// The runs whose columns hold the values `filter` names, in the record's order.
    fn runs_of(&self, filter: &[(&str, &str)]) -> Vec<&Run> {
        self.runs
            .iter()
            .filter(|run| {
                filter
                    .iter()
                    .all(|(column, value)| run.get(*column).is_some_and(|v| v == value))
            })
            .collect()
    }

    /// The range of `columns` over the runs whose columns hold the values `filter` names.
    fn range(&self, filter: &[(&str, &str)], columns: &[&str]) -> Result<Range> {
        let chosen = self.runs_of(filter);
        if chosen.is_empty() {
            return Err(format!("{} has no run of {filter:?}", self.name).into());
        }
        let (first, rest) = columns.split_first().ok_or("a figure names no column")?;
        rest.iter()
            .try_fold(Range::of(&chosen, first)?, |range, column| {
                Ok(range.and(Range::of(&chosen, column)?))
            })
    }

    /// In a record that states a figure a line (columns `figure` and `value`): the figure
    /// `name` as the page shows it.
    fn stated(&self, name: &str) -> Result<String> {
        Ok(self.range(&[("figure", name)], &["value"])?.shown())
    }
}

/// One line of the table.
struct Figure {
    /// What is measured.
    name: &'static str,
    /// Its value, drawn from the records.
    value: String,
    /// The machine it was measured on.
    machine: &'static str,
    /// The command that measures it (`same`: the line above's).
    command: &'static str,
}

/// The table, as markdown, from the records `read` gives by name.
pub(crate) fn table(read: impl Fn(&str) -> Result<String>) -> Result<String> {
    let record = |name| Record::read(name, &read);
    let (targets, stated) = (record(TARGETS)?, record(STATED)?);
    let mut figures = sqlite(
        &record(SMALL_FUTURES)?,
        &record(FIVE_BUILDS)?,
        &record(INSTRUCTIONS)?,
    )?;
    figures.extend(core(&targets, &stated)?);
    figures.extend(postgres(
        &record(super::POSTGRES_RECORD)?,
        &record(ONE_PROCESS)?,
    )?);
    figures.extend(earlier_sqlite(&targets, &stated)?);
    figures.extend(earlier_signing(&targets, &stated)?);
    let mut out = String::from("| Figure | Value | Machine | Command |\n|---|---|---|---|\n");
    for f in figures {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            f.name, f.value, f.machine, f.command
        );
    }
    Ok(out)
}

/// The database's floor a decision on PostgreSQL (`mandate-bench/pg-floor.sh`).
const FLOOR: &str = "2026-11-26-pg-floor.tsv";

/// The table of the database's floor a decision, as markdown: for each kind of writes
/// (the row; the agent's version, then the row), the database's CPU a decision at each
/// group size, every run's value in the record's order and decimals.
pub(crate) fn floor_table(read: impl Fn(&str) -> Result<String>) -> Result<String> {
    let record = Record::read(FLOOR, &read)?;
    let mut sizes: Vec<&str> = Vec::new();
    for run in &record.runs {
        let size = run
            .get("decisions_per_group")
            .ok_or("a run without its group size")?;
        if !sizes.contains(&size.as_str()) {
            sizes.push(size);
        }
    }
    let mut out = format!(
        "| decisions a group | {} |\n|---{}|\n",
        sizes.join(" | "),
        "|---".repeat(sizes.len())
    );
    for (writes, shown) in [
        ("row", "the row"),
        ("version+row", "the agent's version, then the row"),
    ] {
        let mut cells = Vec::new();
        for size in &sizes {
            let values: Vec<&str> = record
                .runs
                .iter()
                .filter(|run| {
                    run.get("writes").is_some_and(|w| w == writes)
                        && run.get("decisions_per_group").is_some_and(|s| s == size)
                })
                .filter_map(|run| run.get("db_us_per_decision").map(String::as_str))
                .collect();
            if values.is_empty() {
                return Err(format!("{FLOOR} has no run of {writes} at {size}").into());
            }
            cells.push(format!("{} µs", values.join(" / ")));
        }
        let _ = writeln!(out, "| {shown} | {} |", cells.join(" | "));
    }
    Ok(out)
}

/// The record of the database's floor a decision at one organization and at many
/// (`mandate-bench/pg-floor.sh` with `ORGS`), run in rounds.
const FLOOR_BY_ORGANIZATIONS: &str = "2026-11-29-pg-floor-ids-lead-by-organizations.tsv";

/// The table of the database's floor a decision at one organization and at many, as
/// markdown: for each kind of writes, every round's CPU a decision at each number of
/// organizations, and the ratio of the many's to the one's, round by round.
pub(crate) fn floor_by_organizations_table(
    read: impl Fn(&str) -> Result<String>,
) -> Result<String> {
    let record = Record::read(FLOOR_BY_ORGANIZATIONS, &read)?;
    let (one, many) = ("1", "1000");
    let value = |run: &Run, column: &str| -> Result<f64> {
        run.get(column)
            .ok_or_else(|| format!("{FLOOR_BY_ORGANIZATIONS}: a run without {column}"))?
            .parse::<f64>()
            .map_err(|e| format!("{FLOOR_BY_ORGANIZATIONS}: {column}: {e}").into())
    };
    // The group size every run shares, for the header.
    let mut sizes: Vec<&str> = record
        .runs
        .iter()
        .filter_map(|run| run.get("decisions_per_group").map(String::as_str))
        .collect();
    sizes.dedup();
    let [size] = sizes[..] else {
        return Err(format!("{FLOOR_BY_ORGANIZATIONS}: the runs must share one group size").into());
    };
    let mut out = format!(
        "| writes, {size} decisions a group | 1 organization | 1,000 organizations | 1,000 against 1, round by round |\n|---|---|---|---|\n"
    );
    for (writes, shown) in [
        ("row", "the row"),
        ("row+version", "the agent's version, then the row"),
        (
            "row+version+seqs",
            "the agent's version, the organization's seqs, then the row",
        ),
    ] {
        let of = |orgs: &str| record.runs_of(&[("writes", writes), ("orgs", orgs)]);
        let (ones, manys) = (of(one), of(many));
        if ones.is_empty() || manys.is_empty() {
            return Err(
                format!("{FLOOR_BY_ORGANIZATIONS} has no runs of {writes} at 1 and 1,000").into(),
            );
        }
        let shown_values = |runs: &[&Run]| -> Result<String> {
            let values = runs
                .iter()
                .map(|run| {
                    run.get("db_us_per_decision")
                        .map(String::as_str)
                        .ok_or("a run without db_us_per_decision")
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(format!("{} µs", values.join(" / ")))
        };
        let mut ratios = Vec::new();
        for run in &manys {
            let round = run.get("round").ok_or("a run without its round")?;
            let base = ones
                .iter()
                .find(|o| o.get("round") == Some(round))
                .ok_or_else(|| {
                    format!("{FLOOR_BY_ORGANIZATIONS}: round {round} has no run at 1")
                })?;
            let ratio = value(run, "db_us_per_decision")? / value(base, "db_us_per_decision")?;
            ratios.push(number(ratio, 2));
        }
        let _ = writeln!(
            out,
            "| {shown} | {} | {} | {} |",
            shown_values(&ones)?,
            shown_values(&manys)?,
            ratios.join(" / ")
        );
    }
    Ok(out)
}

/// The record of whole decisions on plain PostgreSQL at one organization and at many
/// (`mandate-bench/pg-sitting.sh 2` with `ORGS`), run in rounds, each round's runs at one
/// organization and at many side by side.
const SITTING_BY_ORGANIZATIONS: &str =
    "2026-11-29-postgres-quiet-held-in-memory-by-organizations.tsv";

/// The build whose runs [`sitting_by_organizations_table`] shows (the record also holds
/// the build before it, for the pair).
const SITTING_BUILD: &str = "ee7dbb3";

/// The table of whole decisions at one organization and at many, as markdown: for each
/// number of organizations, every round's decisions a second and database CPU a decision,
/// and, past one, each round's ratios to the run at one organization in the same round.
pub(crate) fn sitting_by_organizations_table(
    read: impl Fn(&str) -> Result<String>,
) -> Result<String> {
    let record = Record::read(SITTING_BY_ORGANIZATIONS, &read)?;
    let name = SITTING_BY_ORGANIZATIONS;
    let value = |run: &Run, column: &str| -> Result<f64> {
        run.get(column)
            .ok_or_else(|| format!("{name}: a run without {column}"))?
            .parse::<f64>()
            .map_err(|e| format!("{name}: {column}: {e}").into())
    };
    let of = |orgs: &str| record.runs_of(&[("build", SITTING_BUILD), ("orgs", orgs)]);
    let ones = of("1");
    if ones.is_empty() {
        return Err(format!("{name} has no run of {SITTING_BUILD} at 1").into());
    }
    let mut out = String::from(
        "| organizations | decisions/s, round by round | database CPU a decision | \
         against 1 in the same round: CPU; decisions/s |\n|---|---|---|---|\n",
    );
    for orgs in ["1", "32", "1000"] {
        let runs = of(orgs);
        if runs.is_empty() {
            return Err(format!("{name} has no run of {SITTING_BUILD} at {orgs}").into());
        }
        let mut rates = Vec::new();
        let mut cpus = Vec::new();
        let mut ratios = Vec::new();
        for run in &runs {
            let (rate, cpu) = (
                value(run, "decisions_per_s")?,
                value(run, "pg_cpu_us_per_decision")?,
            );
            rates.push(number(rate, 0));
            cpus.push(number(cpu, 1));
            if orgs != "1" {
                let round = run.get("round").ok_or("a run without its round")?;
                let base = ones
                    .iter()
                    .find(|o| o.get("round") == Some(round))
                    .ok_or_else(|| format!("{name}: round {round} has no run at 1"))?;
                ratios.push(format!(
                    "{}; {}",
                    number(cpu / value(base, "pg_cpu_us_per_decision")?, 2),
                    number(rate / value(base, "decisions_per_s")?, 2)
                ));
            }
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} µs | {} |",
            number(orgs.parse::<f64>().map_err(|e| format!("{orgs}: {e}"))?, 0),
            rates.join(" / "),
            cpus.join(" / "),
            if ratios.is_empty() {
                "—".to_owned()
            } else {
                ratios.join(" / ")
            }
        );
    }
    Ok(out)
}

/// SQLite on the AMD EPYC machine: the closed loop and its first pass, bytes and
/// instructions a decision.
fn sqlite(futures: &Record, builds: &Record, instructions: &Record) -> Result<Vec<Figure>> {
    let of = |measure: &str, columns: &[&str]| {
        let range = futures.range(&[("build", "79d02c7"), ("measure", measure)], columns)?;
        Ok::<_, Error>(range.shown())
    };
    let spread = |measure: &str| of(measure, &["min", "max"]);
    let bytes = |build: &str| builds.range(&[("build", build)], &["bytes_per_decision"]);
    let count = |rounds: &str| {
        let run = [("build", "bca56b6"), ("log_rounds", rounds)];
        instructions.range(&run, &["instructions_per_decision"])
    };
    Ok(vec![
        Figure {
            name: "Authorizations/s, closed loop",
            value: format!(
                "**{}/s** (median {})",
                spread("authorizations_per_s")?,
                of("authorizations_per_s", &["median"])?
            ),
            machine: EPYC,
            command: "`mandate-bench --agents 100000 --duration 10 --no-echo`",
        },
        Figure {
            name: "Server CPU a request, same runs",
            value: format!(
                "**{} µs** (median {}); {} times the load generator's",
                spread("server_us_per_request")?,
                of("server_us_per_request", &["median"])?,
                spread("server_to_generator_ratio")?
            ),
            machine: EPYC,
            command: "same",
        },
        Figure {
            name: "First pass (each agent's state loaded from the database)",
            value: format!("{}/s", spread("first_pass_per_s")?),
            machine: EPYC,
            command: "same",
        },
        Figure {
            name: "Bytes a decision (database growth, every decision in the log)",
            value: format!(
                "**{}** ({} with no log round in the run)",
                bytes("44e408e")?.shown(),
                bytes("44e408e-nolog")?.shown()
            ),
            machine: EPYC,
            command: "same",
        },
        Figure {
            name: "Instructions a decision",
            value: format!(
                "**{}** ({} with the log's rounds off)",
                count("every second")?.shown(),
                count("off")?.shown()
            ),
            machine: EPYC,
            command: "`mandate-bench/instructions.sh target/release/mandate-server`",
        },
    ])
}

/// mandate-core's benches on the AMD EPYC machine: policy evaluation, the log's leaf hash.
fn core(targets: &Record, stated: &Record) -> Result<Vec<Figure>> {
    Ok(vec![
        Figure {
            name: "Policy evaluation, every rule present",
            value: format!(
                "`evaluate` **{} ns**; with `record` {} ns; {} ns a decision over the mix",
                targets.stated("evaluate_ns")?,
                stated.stated("evaluate_and_record_ns")?,
                stated.stated("evaluate_mixed_ns")?
            ),
            machine: EPYC,
            command: "`cargo bench -p mandate-core --bench core -- evaluate`",
        },
        Figure {
            name: "The decision log's leaf hash (SHA-256 of the token)",
            value: format!("{} ns", stated.stated("leaf_hash_ns")?),
            machine: EPYC,
            command: "`cargo bench -p mandate-core --bench core -- leaf_hash`",
        },
    ])
}

/// PostgreSQL on the AMD EPYC machine: two server processes (the build docs/scale.md
/// describes) and one.
fn postgres(organizations: &Record, one_process: &Record) -> Result<Vec<Figure>> {
    let two = |column: &str| {
        let runs = [("build", "head"), ("orgs", "1"), ("params", "-")];
        Ok::<_, Error>(organizations.range(&runs, &[column])?.shown())
    };
    let one = |column: &str| {
        let runs = [("build", "97e6a1a-nolog")];
        Ok::<_, Error>(one_process.range(&runs, &[column])?.shown())
    };
    Ok(vec![
        Figure {
            name: "PostgreSQL, 2 server processes, 20,000 agents, 1 organization",
            value: format!(
                "**{}/s**, p99 {} ms, {} µs of database CPU a decision",
                two("decisions_per_s")?,
                two("p99_ms")?,
                two("pg_cpu_us_per_decision")?
            ),
            machine: EPYC,
            command: "`mandate-bench/pg-sitting.sh 2`",
        },
        Figure {
            name: "PostgreSQL, 1 server process, 20,000 agents, the log's rounds off",
            value: format!(
                "{}/s, p99 {} ms; server {} µs, database {} µs a decision",
                one("decisions_per_s")?,
                one("p99_ms")?,
                one("server_us_per_decision")?,
                one("db_us_per_decision")?
            ),
            machine: EPYC,
            command: "`MANDATE_LOG_CHECKPOINT_INTERVAL=600000 mandate-bench/pg-sitting.sh 1`",
        },
    ])
}

/// SQLite on the earlier machine: the echo ratio, the open loop's tail, 10 M decisions.
fn earlier_sqlite(targets: &Record, stated: &Record) -> Result<Vec<Figure>> {
    let runs = |name: &str| {
        let range = targets.range(&[("figure", name)], &["runs"])?;
        Ok::<_, Error>(in_words(range.shown()))
    };
    Ok(vec![
        Figure {
            name: "Authorizations/s with the echo",
            value: format!(
                "{}/s over {} runs, {} of the echo; server {} µs a request",
                targets.stated("authorizations_per_s")?,
                runs("authorizations_per_s")?,
                targets.stated("ratio_to_echo")?,
                targets.stated("server_us_per_request")?
            ),
            machine: EARLIER,
            command: "`mandate-bench --agents 100000 --duration 10`",
        },
        Figure {
            name: "p99 at 12,500/s (open loop)",
            value: format!(
                "**{} ms** over {} runs; p50 {} ms; worst second's p99 {} ms",
                targets.stated("p99_ms_at_12500")?,
                runs("p99_ms_at_12500")?,
                stated.stated("p50_ms_at_12500")?,
                stated.stated("p99_worst_second_ms_at_12500")?
            ),
            machine: EARLIER,
            command: "`mandate-bench --agents 100000 --duration 10 --rate 12500 --no-echo`",
        },
        Figure {
            name: "With 10 M stored decisions",
            value: format!(
                "throughput {:.0} % of an empty database's (two alternating pairs); VmHWM {} MiB ({} empty); {} bytes a decision",
                100.0 * ten_million_share(targets)?,
                targets.stated("vmhwm_mib_10m")?,
                stated.stated("vmhwm_mib_empty")?,
                targets.stated("bytes_per_decision")?
            ),
            machine: EARLIER,
            command: "`mandate-bench --agents 100000 --duration 10 --prefill 10000000 --no-echo`",
        },
    ])
}

/// Signing and Cedar on the earlier machine.
fn earlier_signing(targets: &Record, stated: &Record) -> Result<Vec<Figure>> {
    let verify = targets.range(&[("figure", "es256_verify_us_p256")], &["value"])?;
    let per_core = (1_000_000.0 / verify.high / 10.0).round() * 10.0;
    Ok(vec![
        Figure {
            name: "ES256",
            value: format!(
                "aws-lc signs in {} µs, p256 in {} µs; p256 verifies in {} µs (2 keys in the set: ~{}/s per core)",
                targets.stated("es256_sign_us_aws_lc")?,
                stated.stated("es256_sign_us_p256")?,
                verify.shown(),
                number(per_core, 0)
            ),
            machine: EARLIER,
            command: "`cargo bench -p mandate-server --bench signing`, `cargo bench -p mandate-core --bench core -- verify`",
        },
        Figure {
            name: "Cedar on the same 4,000 requests",
            value: format!(
                "Cedar {} µs, mandate-core {} ns a decision",
                targets.stated("cedar_us_per_decision")?,
                stated.stated("cedar_compare_core_ns")?
            ),
            machine: EARLIER,
            command: "`cd benches/cedar-compare && cargo bench`",
        },
    ])
}

/// Throughput with 10 M stored decisions as a share of an empty database's, on the means of
/// the two alternating pairs: `pair_10m_then_empty_per_s` states "10 M / empty",
/// `pair_empty_then_10m_per_s` "empty / 10 M".
fn ten_million_share(targets: &Record) -> Result<f64> {
    let pair = |name: &str| -> Result<(f64, f64)> {
        let run = targets
            .runs
            .iter()
            .find(|run| run.get("figure").is_some_and(|f| f == name))
            .ok_or_else(|| format!("{} has no figure {name}", targets.name))?;
        let text = run.get("value").map_or("", String::as_str);
        let rate = |s: &str| s.trim().parse::<f64>().ok();
        text.split_once('/')
            .and_then(|(a, b)| Some((rate(a)?, rate(b)?)))
            .ok_or_else(|| format!("{name} is not a pair of rates: {text}").into())
    };
    let (full_first, empty_second) = pair("pair_10m_then_empty_per_s")?;
    let (empty_first, full_second) = pair("pair_empty_then_10m_per_s")?;
    Ok((full_first + full_second) / (empty_first + empty_second))
}

/// A count of runs as the page writes it: `three`, not `3`.
fn in_words(count: String) -> String {
    let words = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    count
        .parse::<usize>()
        .ok()
        .and_then(|n| words.get(n.checked_sub(1)?))
        .map_or(count, |word| (*word).to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// A record stating figures a line, as the earlier sittings' records do.
    fn stated(text: &str) -> Record {
        Record {
            name: "stated.tsv",
            runs: runs(&format!("figure\tvalue\truns\n{text}")).unwrap(),
        }
    }

    /// Each kind of writes shows every run at one organization and at many in the record's
    /// order and decimals, and the ratios pair the runs of one round, whatever their order.
    #[test]
    fn the_floor_by_organizations_pairs_the_runs_of_each_round() {
        let mut text = String::from(
            "# a note\nround\torgs\twrites\tdecisions_per_group\tdecisions_per_s\tdb_us_per_decision\n",
        );
        for (round, orgs, us) in [
            ("1", "1", "40.0"),
            ("1", "1000", "60.0"),
            ("2", "1000", "55.0"),
            ("2", "1", "50.0"),
        ] {
            for writes in ["row", "row+version", "row+version+seqs"] {
                text.push_str(&format!("{round}\t{orgs}\t{writes}\t14\t1000\t{us}\n"));
            }
        }
        let table = floor_by_organizations_table(|_| Ok(text.clone())).unwrap();
        let lines: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "| the row | 40.0 / 50.0 µs | 60.0 / 55.0 µs | 1.50 / 1.10 |"
        );
        // A round without its run at one organization is an error, not a ratio to another's.
        let lacking = text.replace("2\t1\t", "3\t1\t");
        let error = floor_by_organizations_table(|_| Ok(lacking.clone())).unwrap_err();
        assert!(
            error.to_string().contains("round 2 has no run at 1"),
            "{error}"
        );
    }

    #[test]
    fn the_sitting_by_organizations_pairs_each_round_with_its_run_at_one() {
        let mut text =
            String::from("# a note\nround\tbuild\torgs\tdecisions_per_s\tpg_cpu_us_per_decision\n");
        for (round, build, orgs, rate, us) in [
            ("1", SITTING_BUILD, "1", "4000", "200.0"),
            ("1", SITTING_BUILD, "1000", "3600", "240.0"),
            ("1", "before", "1000", "3000", "300.0"),
            ("2", SITTING_BUILD, "1000", "4400", "210.0"),
            ("2", SITTING_BUILD, "1", "4000", "210.0"),
            ("3", SITTING_BUILD, "1", "5000", "150.0"),
            ("3", SITTING_BUILD, "32", "4500", "180.0"),
        ] {
            text.push_str(&format!("{round}\t{build}\t{orgs}\t{rate}\t{us}\n"));
        }
        let table = sitting_by_organizations_table(|_| Ok(text.clone())).unwrap();
        let lines: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "| 1 | 4,000 / 4,000 / 5,000 | 200.0 / 210.0 / 150.0 µs | — |",
                "| 32 | 4,500 | 180.0 µs | 1.20; 0.90 |",
                "| 1,000 | 3,600 / 4,400 | 240.0 / 210.0 µs | 1.20; 0.90 / 1.00; 1.10 |",
            ]
        );
        // A round without its run at one organization is an error, not a ratio to another's.
        let lacking = text.replace(&format!("3\t{SITTING_BUILD}\t1\t"), "4\tother\t1\t");
        let error = sitting_by_organizations_table(|_| Ok(lacking.clone())).unwrap_err();
        assert!(
            error.to_string().contains("round 3 has no run at 1"),
            "{error}"
        );
    }

    /// A value keeps the decimals its record writes, a range or list of them shows its ends,
    /// and the thousands are separated.
    #[test]
    fn a_stated_value_keeps_its_records_decimals() {
        let record = stated(
            "a\t63.2-68.0\t2\nb\t2.05, 2.51, 2.29\t3\nc\t26606\t1\nc\t29840\t1\nd\t0.296-0.303\t3\n",
        );
        assert_eq!(record.stated("a").unwrap(), "63.2–68.0");
        assert_eq!(record.stated("b").unwrap(), "2.05–2.51");
        assert_eq!(record.stated("c").unwrap(), "26,606–29,840");
        assert_eq!(record.stated("d").unwrap(), "0.296–0.303");
        assert!(record.stated("e").unwrap_err().0.contains("stated.tsv"));
    }

    /// The 10 M share compares the means of each pair's runs in the order each pair names.
    #[test]
    fn the_ten_million_share_reads_each_pair_in_its_order() {
        let record = stated(
            "pair_10m_then_empty_per_s\t35620 / 33077\t1\npair_empty_then_10m_per_s\t35554 / 34780\t1\n",
        );
        let share = ten_million_share(&record).unwrap();
        assert_eq!(format!("{:.0}", 100.0 * share), "103");
        assert_eq!(in_words("3".into()), "three");
        assert_eq!(in_words("12".into()), "12");
    }
}
