//! The figures the docs show, drawn from the measurement records in `mandate-bench/results/`
//! (`mandate-bench --figures write`): docs/scale.md's table of deployments (decisions/s, p99,
//! database CPU a decision), the sizing table that follows from it and a plot of the rates
//! (`docs/figures/deployments.svg`); docs/performance.md's table of figures
//! ([`performance`]). Each record is a TSV file of one sitting: `#` lines say the machine,
//! builds and commands, then a header line, then one line a run. The deployments take the
//! runs of build `head` (the build the docs describe) and show each setting's range over its
//! runs.
//!
//! `--figures check` (and the test below) fails when the docs no longer say what the
//! records give: a docs figure is never edited by hand.

mod performance;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::Result;

/// The record of plain PostgreSQL at 1, 32 and 1,000 organizations.
pub(crate) const POSTGRES_RECORD: &str = "2026-11-28-postgres-organizations-log-rounds.tsv";
/// The record of plain PostgreSQL against Citus in one sitting.
pub(crate) const CITUS_RECORD: &str = "2026-11-28-citus-one-shard-a-worker.tsv";
/// The record of Citus with each organization routed to the process on its worker, beside
/// plain PostgreSQL, in one sitting.
pub(crate) const ROUTED_RECORD: &str = "2026-11-29-citus-routed-by-organization.tsv";
/// The page the deployments and sizing tables go in, between their markers.
pub(crate) const PAGE: &str = "docs/scale.md";
/// The plot, beside the page.
pub(crate) const PLOT: &str = "docs/figures/deployments.svg";

/// One run of a record: a map of column to value.
type Run = BTreeMap<String, String>;

/// One record's runs.
fn runs(text: &str) -> Result<Vec<Run>> {
    let mut lines = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or("a record has no header line")?
        .split('\t')
        .collect();
    lines
        .map(|line| {
            let values: Vec<&str> = line.split('\t').collect();
            if values.len() != header.len() {
                return Err(format!(
                    "a record's line has {} values for {} columns: {line}",
                    values.len(),
                    header.len()
                )
                .into());
            }
            Ok(header
                .iter()
                .zip(values)
                .map(|(k, v)| ((*k).to_owned(), v.to_owned()))
                .collect())
        })
        .collect()
}

/// A setting's range over its runs: the lowest and highest of a column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Range {
    pub(crate) low: f64,
    pub(crate) high: f64,
    /// The most decimals a value has as the record writes it: the precision it was measured to.
    pub(crate) decimals: usize,
}

impl Range {
    /// `column` over `runs`. A value may be one number (`85.1`, `53%`) or, where a record
    /// states what a sitting gave rather than a line a run, a range (`526-530`) or a list
    /// (`2.05, 2.51, 2.29`): each of its numbers counts.
    fn of(runs: &[&Run], column: &str) -> Result<Self> {
        let (mut values, mut decimals) = (Vec::new(), 0);
        for run in runs {
            let text = run
                .get(column)
                .ok_or_else(|| format!("a record has no column {column}"))?;
            for number in text.trim_end_matches('%').split([',', '-']) {
                let number = number.trim();
                let value: f64 = number
                    .parse()
                    .map_err(|_| format!("{column} is not a number: {text}"))?;
                let places = number.split_once('.').map_or(0, |(_, f)| f.len());
                values.push(value);
                decimals = decimals.max(places);
            }
        }
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() {
            return Err(format!("no run for {column}").into());
        }
        Ok(Self {
            low,
            high,
            decimals,
        })
    }

    /// The range over both, for a figure drawn from several columns (`min` and `max`).
    fn and(self, other: Self) -> Self {
        Self {
            low: self.low.min(other.low),
            high: self.high.max(other.high),
            decimals: self.decimals.max(other.decimals),
        }
    }

    /// As docs/performance.md writes it: each end to the decimals the record gives, with
    /// thousands separated and an en dash between, one number when both ends are alike
    /// (`26,606–29,840`, `54.3–60.6`, `436`).
    pub(crate) fn shown(self) -> String {
        let (low, high) = (
            number(self.low, self.decimals),
            number(self.high, self.decimals),
        );
        if low == high {
            low
        } else {
            format!("{low}–{high}")
        }
    }

    /// As the docs write it: each end rounded to `step`, with thousands separated, one
    /// number when both ends round alike (`9,870-11,140`, `23`).
    pub(crate) fn text(self, step: f64) -> String {
        let end = |v: f64| thousands((v / step).round() * step);
        let (low, high) = (end(self.low), end(self.high));
        if low == high {
            low
        } else {
            format!("{low}-{high}")
        }
    }
}

/// `value` (a whole number) with a comma every three digits.
fn thousands(value: f64) -> String {
    number(value, 0)
}

/// `value` to `decimals` places, its whole part with a comma every three digits.
fn number(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let (sign, digits) = whole.split_at(usize::from(whole.starts_with('-')));
    let mut out = String::from(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// One line of the deployments table, with its rate for the plot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Deployment {
    pub(crate) name: String,
    pub(crate) agents: String,
    pub(crate) rate: Range,
    pub(crate) p99: Range,
    pub(crate) cpu: Range,
    /// Citus: the coordinator's part of the CPU.
    pub(crate) coordinator: Option<Range>,
}

/// The deployments the two records give, in the table's order.
pub(crate) fn deployments(postgres: &str, citus: &str) -> Result<Vec<Deployment>> {
    let postgres = runs(postgres)?;
    let citus = runs(citus)?;
    let is = |run: &Run, column: &str, value: &str| run.get(column).is_some_and(|v| v == value);
    let mut out = Vec::new();
    for orgs in ["1", "32", "1000"] {
        let chosen: Vec<_> = postgres
            .iter()
            .filter(|r| is(r, "build", "head") && is(r, "orgs", orgs) && is(r, "params", "-"))
            .collect();
        out.push(Deployment {
            name: "PostgreSQL 15".into(),
            agents: format!("20,000 in {}", thousands(orgs.parse().unwrap_or(0.0))),
            rate: Range::of(&chosen, "decisions_per_s")?,
            p99: Range::of(&chosen, "p99_ms")?,
            cpu: Range::of(&chosen, "pg_cpu_us_per_decision")?,
            coordinator: None,
        });
    }
    let load = |run: &Run, kind: &str| {
        is(run, "build", "head")
            && is(run, "run", kind)
            && run.get("setting").is_some_and(|s| s.starts_with("load"))
    };
    let chosen: Vec<_> = citus.iter().filter(|r| load(r, "postgres")).collect();
    out.push(Deployment {
        name: "PostgreSQL 15".into(),
        agents: "2,000 in 32".into(),
        rate: Range::of(&chosen, "decisions_per_s")?,
        p99: Range::of(&chosen, "p99_ms")?,
        cpu: Range::of(&chosen, "db_us_per_decision")?,
        coordinator: None,
    });
    // A Citus line a shard count: Citus's default first, then each the record sets, falling.
    let mut counts: Vec<u32> = citus
        .iter()
        .filter(|r| load(r, "citus-workers"))
        .map(shards)
        .collect();
    counts.sort_by_key(|&n| (n != DEFAULT_SHARDS, std::cmp::Reverse(n)));
    counts.dedup();
    if counts.is_empty() {
        counts.push(DEFAULT_SHARDS);
    }
    for count in counts {
        let chosen: Vec<_> = citus
            .iter()
            .filter(|r| load(r, "citus-workers") && shards(r) == count)
            .collect();
        out.push(citus_line(&format!("{count} shards a table"), &chosen)?);
    }
    Ok(out)
}

/// A Citus line of the sittings' agents and organizations, a process on each worker, `how`
/// (its shards a table, after what else sets it apart), from its runs.
fn citus_line(how: &str, chosen: &[&Run]) -> Result<Deployment> {
    Ok(Deployment {
        name: format!("Citus 13.2, a coordinator and 2 workers, a process on each worker, {how}"),
        agents: "2,000 in 32".into(),
        rate: Range::of(chosen, "decisions_per_s")?,
        p99: Range::of(chosen, "p99_ms")?,
        cpu: Range::of(chosen, "db_us_per_decision")?,
        coordinator: Some(Range::of(chosen, "coordinator_us")?),
    })
}

/// The Citus line of a sitting that routed each organization to the process on its worker
/// (its `spread` `worker` runs of `citus-workers`), with its shards a table (`SHARD_COUNT`
/// of its commands).
pub(crate) fn routed(record: &str) -> Result<Deployment> {
    let shards = record
        .lines()
        .filter(|line| line.starts_with('#'))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("SHARD_COUNT="))
        })
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(DEFAULT_SHARDS);
    let runs = runs(record)?;
    let chosen: Vec<_> = runs
        .iter()
        .filter(|r| {
            r.get("spread").is_some_and(|v| v == "worker")
                && r.get("run").is_some_and(|v| v == "citus-workers")
        })
        .collect();
    citus_line(&format!("{ROUTED}, {shards} shards a table"), &chosen)
}

/// How a routed line's name says it.
const ROUTED: &str = "each organization routed to it";

/// Citus's own number of shards a distributed table gets (`citus.shard_count` unset).
const DEFAULT_SHARDS: u32 = 32;

/// The shards a table had in a Citus run: its setting's `SHARD_COUNT=n`, else Citus's default.
fn shards(run: &Run) -> u32 {
    run.get("setting")
        .and_then(|s| {
            s.split_whitespace()
                .find_map(|word| word.strip_prefix("SHARD_COUNT="))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_SHARDS)
}

/// The deployments table, as markdown.
pub(crate) fn deployments_table(deployments: &[Deployment]) -> String {
    let mut out = String::from(
        "| Deployment (2 processes) | Agents, organizations | Decisions/s | p99 | Database CPU a decision |\n|---|---|---|---|---|\n",
    );
    for d in deployments {
        let coordinator = d
            .coordinator
            .map(|c| format!(" (the coordinator's share: {} µs)", c.text(1.0)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ms | {} µs{coordinator} |",
            d.name,
            d.agents,
            d.rate.text(10.0),
            d.p99.text(1.0),
            d.cpu.text(1.0),
        );
    }
    out
}

/// The sizing table: for a rate, the database cores a plain primary and a Citus cluster
/// need at the highest database CPU a decision measured at 32 organizations (each a
/// deployment's, summed over its nodes for Citus, with the fewest shards a table measured:
/// docs/scale.md advises few); then what a core of each carries, and the worker cores that
/// pass one primary's rate once, twice and four times.
pub(crate) fn sizing_table(deployments: &[Deployment]) -> Result<String> {
    // The last of a name: for Citus, the fewest shards (the deployments' order).
    let find = |name: &str, agents: &str| {
        deployments
            .iter()
            .rfind(|d| d.name.starts_with(name) && d.agents == agents && !d.name.contains(ROUTED))
            .ok_or_else(|| format!("no {name} deployment of {agents}"))
    };
    let primary = find("PostgreSQL", "20,000 in 32")?.cpu.high;
    let citus = find("Citus", "2,000 in 32")?;
    let cluster = citus.cpu.high;
    let shards = citus.name.rsplit_once(", ").map_or("", |(_, s)| s);
    let mut out = format!(
        "| Decisions/s to carry | PostgreSQL primary, database cores (at {primary:.0} µs) | Citus workers, database cores summed (at {cluster:.0} µs, {shards}) |\n|---|---|---|\n"
    );
    for rate in [5_000.0, 20_000.0, 40_000.0] {
        let cores = |us: f64| (rate * us / 1_000_000.0).ceil();
        let workers = cores(cluster);
        // The fewest cores a worker from 4, 8, 16 and 32 that makes at most 5 workers, and
        // at least 2 workers (a cluster of one worker is one primary with extra steps).
        let shape = [4.0, 8.0, 16.0, 32.0]
            .iter()
            .map(|per: &f64| (*per, (workers / per).ceil().max(2.0)))
            .find(|(_, n)| *n <= 5.0)
            .map_or_else(String::new, |(per, n)| {
                format!(" (e.g. {n:.0} workers of {per:.0} cores)")
            });
        let _ = writeln!(
            out,
            "| {} | {:.0} | {workers:.0}{shape} |",
            thousands(rate),
            cores(primary)
        );
    }
    // What a core carries, to the hundred; the cluster's cores to pass a primary of `n`.
    let carries = |us: f64| thousands((1_000_000.0 / us / 100.0).round() * 100.0);
    let ratio = cluster / primary;
    let _ = write!(
        out,
        "\nA database core of a primary carries about {} decisions a second, a Citus worker \
         core about {}: a cluster passes the rate of a primary of N cores with about \
         {:.1} × N worker cores, twice it with {:.1} × N and four times with {:.1} × N (for an \
         8-core primary: {:.0}, {:.0} and {:.0}).\n",
        carries(primary),
        carries(cluster),
        ratio,
        2.0 * ratio,
        4.0 * ratio,
        (8.0 * ratio).ceil(),
        (16.0 * ratio).ceil(),
        (32.0 * ratio).ceil(),
    );
    Ok(out)
}

/// The plot: a bar a deployment, from 0 to its highest rate, the part below its lowest
/// darker, with both ends written beside it.
pub(crate) fn plot(deployments: &[Deployment]) -> String {
    let (left, bar_width, row) = (360.0, 320.0, 30.0);
    let top = deployments.iter().map(|d| d.rate.high).fold(1.0, f64::max);
    let height = 40.0 + row * deployments.len() as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"780\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"10\" y=\"18\" font-weight=\"bold\">Decisions a second, 2 mandate-server processes (the range over the runs)</text>\n"
    );
    for (i, d) in deployments.iter().enumerate() {
        let y = 30.0 + row * i as f64;
        let short = match d.name.rsplit_once(", ") {
            Some((_, shards)) if d.name.starts_with("Citus") => format!(
                "Citus 13.2, 2 workers, {}{}",
                shards.replace(" a table", ""),
                if d.name.contains(ROUTED) {
                    ", routed"
                } else {
                    ""
                }
            ),
            _ => "PostgreSQL 15".to_owned(),
        };
        let low = bar_width * d.rate.low / top;
        let high = bar_width * d.rate.high / top;
        let _ = write!(
            out,
            "<text x=\"10\" y=\"{:.0}\">{short}: {}</text>\n\
             <rect x=\"{left:.0}\" y=\"{y:.0}\" width=\"{high:.1}\" height=\"18\" fill=\"#9ecae1\"/>\n\
             <rect x=\"{left:.0}\" y=\"{y:.0}\" width=\"{low:.1}\" height=\"18\" fill=\"#3182bd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.0}\">{}</text>\n",
            y + 13.0,
            label(&d.agents),
            left + high + 6.0,
            y + 13.0,
            d.rate.text(10.0),
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A deployment's agents as the plot says them: "20,000 agents in 32 organizations".
fn label(agents: &str) -> String {
    let text = agents.replace(" in ", " agents in ");
    if text.ends_with(" in 1") {
        format!("{text} organization")
    } else {
        format!("{text} organizations")
    }
}

/// What docs/scale.md and its plot should hold, from the records under `root`.
struct Drawn {
    table: String,
    sizing: String,
    plot: String,
}

/// The record `name` under `root`'s `mandate-bench/results/`.
fn read(root: &Path, name: &str) -> Result<String> {
    let path = root.join("mandate-bench").join("results").join(name);
    Ok(std::fs::read_to_string(path)
        .map_err(|e| format!("reading mandate-bench/results/{name}: {e}"))?)
}

/// docs/scale.md's tables and plot, from the records under `root`.
fn draw(root: &Path) -> Result<Drawn> {
    let mut deployments = deployments(&read(root, POSTGRES_RECORD)?, &read(root, CITUS_RECORD)?)?;
    deployments.push(routed(&read(root, ROUTED_RECORD)?)?);
    Ok(Drawn {
        table: deployments_table(&deployments),
        sizing: sizing_table(&deployments)?,
        plot: plot(&deployments),
    })
}

/// `page` (the text of the file `path`) with the lines between `<!-- figures: NAME -->` and
/// `<!-- /figures -->` replaced by `body`.
fn put(path: &str, page: &str, name: &str, body: &str) -> Result<String> {
    let open = format!("<!-- figures: {name} -->\n");
    let start = page
        .find(&open)
        .ok_or_else(|| format!("{path} has no `<!-- figures: {name} -->` marker"))?
        + open.len();
    let end = page[start..]
        .find("<!-- /figures -->")
        .ok_or_else(|| format!("{path}'s figures {name} are not closed by `<!-- /figures -->`"))?
        + start;
    Ok(format!("{}{body}{}", &page[..start], &page[end..]))
}

/// The file `path` under `root` with each of `blocks` (a name and its body) put in.
fn fill(root: &Path, path: &str, blocks: &[(&str, &str)]) -> Result<String> {
    let mut page =
        std::fs::read_to_string(root.join(path)).map_err(|e| format!("reading {path}: {e}"))?;
    for (name, body) in blocks {
        page = put(path, &page, name, body)?;
    }
    Ok(page)
}

/// Each file the figures go in (a path under `root`) with what the records say it holds.
fn expected(root: &Path) -> Result<Vec<(&'static str, String)>> {
    let drawn = draw(root)?;
    let scale = fill(
        root,
        PAGE,
        &[("deployments", &drawn.table), ("sizing", &drawn.sizing)],
    )?;
    let figures = performance::table(|name| read(root, name))?;
    let floor = performance::floor_table(|name| read(root, name))?;
    let floor_by_organizations =
        performance::floor_by_organizations_table(|name| read(root, name))?;
    let sitting_by_organizations =
        performance::sitting_by_organizations_table(|name| read(root, name))?;
    let performance = fill(
        root,
        performance::PAGE,
        &[
            ("performance", &figures),
            ("floor", &floor),
            ("floor-by-organizations", &floor_by_organizations),
            ("sitting-by-organizations", &sitting_by_organizations),
        ],
    )?;
    Ok(vec![
        (PAGE, scale),
        (PLOT, drawn.plot),
        (performance::PAGE, performance),
    ])
}

/// `--figures write`: writes the tables into the pages and the plot beside them.
pub(crate) fn write(root: &Path) -> Result<()> {
    let files = expected(root)?;
    std::fs::create_dir_all(root.join("docs").join("figures"))?;
    for (path, text) in &files {
        std::fs::write(root.join(path), text)?;
    }
    let paths: Vec<&str> = files.iter().map(|(path, _)| *path).collect();
    println!("mandate-bench: wrote the figures of {}", paths.join(", "));
    Ok(())
}

/// `--figures check`: whether the pages and the plot say what the records give; the
/// files that do not named when not.
pub(crate) fn check(root: &Path) -> Result<()> {
    let stale: Vec<&str> = expected(root)?
        .into_iter()
        .filter(|(path, want)| {
            std::fs::read_to_string(root.join(path)).unwrap_or_default() != *want
        })
        .map(|(path, _)| path)
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let verb = if stale.len() == 1 { "says" } else { "say" };
    Err(format!(
        "{} no longer {verb} what mandate-bench/results gives: run `mandate-bench --figures write` from the repository's root",
        stale.join(" and ")
    )
    .into())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    const POSTGRES: &str = "# a note\nbuild\torgs\tparams\tdecisions_per_s\tp99_ms\tpg_cpu_us_per_decision\n\
        head\t1\t-\t9868\t16.6\t85.1\nhead\t1\t-\t11140\t15.4\t73.2\nbase\t1\t-\t99999\t1\t1\n\
        head\t32\t-\t6906\t23.2\t172.8\nhead\t32\tdecision_writers=1\t1\t1\t1\nhead\t32\t-\t6247\t23.0\t186.9\n\
        head\t1000\t-\t5318\t27.6\t227.0\n";
    const CITUS: &str = "build\tsetting\trun\tdecisions_per_s\tp99_ms\tdb_us_per_decision\tcoordinator_us\n\
        head\tload ORGS=32\tpostgres\t6822\t21.7\t163.8\t-\n\
        head\tload ORGS=32\tcitus-workers\t665\t242.1\t1675.6\t17.2\n\
        head\tidle ORGS=64\tcitus-workers\t1\t8.7\t175714.3\t11428.6\n\
        head\tload ORGS=32\tcitus-workers\t917\t190.3\t1860.1\t18.7\n";

    /// The table takes the head build's runs of each setting and shows their range: the
    /// base build, other parameters and the idle runs stay out.
    #[test]
    fn the_table_shows_each_settings_range_over_the_head_builds_runs() {
        let table = deployments_table(&deployments(POSTGRES, CITUS).unwrap());
        let lines: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "| PostgreSQL 15 | 20,000 in 1 | 9,870-11,140 | 15-17 ms | 73-85 µs |",
                "| PostgreSQL 15 | 20,000 in 32 | 6,250-6,910 | 23 ms | 173-187 µs |",
                "| PostgreSQL 15 | 20,000 in 1,000 | 5,320 | 28 ms | 227 µs |",
                "| PostgreSQL 15 | 2,000 in 32 | 6,820 | 22 ms | 164 µs |",
                "| Citus 13.2, a coordinator and 2 workers, a process on each worker, 32 shards a table | 2,000 in 32 | 670-920 | 190-242 ms | 1,676-1,860 µs (the coordinator's share: 17-19 µs) |",
            ]
        );
    }

    /// Runs with `SHARD_COUNT` set make a Citus line of their own, after the default's, and
    /// the sizing takes the fewest shards measured.
    #[test]
    fn each_shard_count_is_a_line_and_sizing_takes_the_fewest() {
        let citus = format!(
            "{CITUS}head\tload ORGS=32 SHARD_COUNT=4\tcitus-workers\t6760\t26.0\t174.1\t1.7\n\
             head\tload ORGS=32 SHARD_COUNT=4\tpostgres\t7000\t11.0\t60.0\t-\n\
             head\tload ORGS=32 SHARD_COUNT=8\tcitus-workers\t5969\t36.9\t205.3\t1.7\n"
        );
        let deployments = deployments(POSTGRES, &citus).unwrap();
        let names: Vec<&str> = deployments
            .iter()
            .filter(|d| d.name.starts_with("Citus"))
            .map(|d| d.name.rsplit_once(", ").unwrap().1)
            .collect();
        assert_eq!(
            names,
            ["32 shards a table", "8 shards a table", "4 shards a table"]
        );
        // The PostgreSQL runs of that sitting join the others'.
        let postgres = &deployments[3];
        assert_eq!(postgres.rate.text(10.0), "6,820-7,000", "{postgres:?}");
        let sizing = sizing_table(&deployments).unwrap();
        assert!(
            sizing.lines().next().unwrap().contains("at 174 µs"),
            "{sizing}"
        );
        assert!(plot(&deployments).contains("Citus 13.2, 2 workers, 4 shards: 2,000 agents"));
    }

    /// A routed sitting's Citus runs of spread `worker` make a line of their own, named
    /// with its shards; the sizing keeps to the lines routed by agent.
    #[test]
    fn a_routed_sitting_is_a_line_the_sizing_leaves_out() {
        let record = "# SHARD_COUNT=2 SPREAD=worker RUNS=\"postgres citus-workers\"\n\
            spread\tround\trun\tdecisions_per_s\tp99_ms\tdb_us_per_decision\tcoordinator_us\n\
            worker\t1\tpostgres\t13000\t17.0\t60.0\t-\n\
            worker\t1\tcitus-workers\t10400\t16.2\t79.3\t0.7\n\
            worker\t2\tcitus-workers\t9700\t23.9\t85.9\t0.9\n\
            agent\t1\tcitus-workers\t9000\t17.9\t102.2\t0.6\n";
        let line = routed(record).unwrap();
        assert!(
            line.name
                .ends_with("each organization routed to it, 2 shards a table")
        );
        assert_eq!(line.rate.text(10.0), "9,700-10,400");
        assert_eq!(line.cpu.text(1.0), "79-86");
        let mut deployments = deployments(POSTGRES, CITUS).unwrap();
        let before = sizing_table(&deployments).unwrap();
        deployments.push(line);
        assert_eq!(sizing_table(&deployments).unwrap(), before);
        assert!(
            plot(&deployments).contains("Citus 13.2, 2 workers, 2 shards, routed: 2,000 agents")
        );
    }

    /// The sizing table divides each rate by what a core carries at the highest CPU a
    /// decision measured, rounding up.
    #[test]
    fn sizing_rounds_cores_up_at_the_highest_cpu_a_decision() {
        let sizing = sizing_table(&deployments(POSTGRES, CITUS).unwrap()).unwrap();
        let lines: Vec<&str> = sizing.lines().collect();
        assert!(
            lines[0].contains("at 187 µs") && lines[0].contains("at 1860 µs"),
            "{sizing}"
        );
        assert_eq!(lines[2], "| 5,000 | 1 | 10 (e.g. 3 workers of 4 cores) |");
        assert_eq!(lines[3], "| 20,000 | 4 | 38 (e.g. 5 workers of 8 cores) |");
        assert_eq!(lines[4], "| 40,000 | 8 | 75 (e.g. 5 workers of 16 cores) |");
        // What a core carries and the ratio, computed from the fixtures above (not measured).
        assert!(
            lines[6].contains("primary carries about 5,400 decisions")
                && lines[6].contains("worker core about 500:")
                && lines[6].contains("about 10.0 × N worker cores, twice it with 19.9 × N")
                && lines[6]
                    .contains("four times with 39.8 × N (for an 8-core primary: 80, 160 and 319)"),
            "{sizing}"
        );
    }

    /// A record whose line has a value too few, a setting without a run or a page without
    /// its marker is refused, naming what to fix.
    #[test]
    fn a_broken_record_or_page_is_named() {
        let short = "build\torgs\nhead\n";
        assert!(
            runs(short)
                .unwrap_err()
                .0
                .contains("1 values for 2 columns")
        );
        let no_thousand = POSTGRES.replace("head\t1000", "base\t1000");
        assert!(
            deployments(&no_thousand, CITUS)
                .unwrap_err()
                .0
                .contains("no run")
        );
        assert!(
            put(PAGE, "text", "sizing", "")
                .unwrap_err()
                .0
                .contains("figures: sizing")
        );
    }

    /// docs/scale.md, its plot and docs/performance.md say what the records in
    /// mandate-bench/results give.
    #[test]
    fn the_docs_figures_are_the_records() {
        // Read when the test runs (cargo sets it), so that a binary reused from a build in
        // another copy of the checkout reads this one.
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        let root = Path::new(&manifest).join("..");
        if let Err(e) = check(&root) {
            panic!("{e}");
        }
    }
}
