//! Output conventions shared by every command.
//!
//! - Progress goes to stderr: a spinner with ✓/✗ on a terminal, plain lines
//!   when stderr is not a terminal or `CI` is set.
//! - Machine output (`--json`) goes to stdout, and nothing else does then.
//! - `NO_COLOR` disables colour; `-q` silences progress, `-v` adds detail.
//! - Tables on stdout are rendered by [`Table`], so they all align alike.

use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use console::{Style, Term};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::envvars;
use crate::error::Error;
use crate::timeline::{SpanGuard, Timeline};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Spinners redrawn in place.
    Tty,
    /// One line per event, for logs and CI.
    Plain,
}

#[derive(Clone)]
pub struct Ui {
    inner: Arc<Inner>,
}

struct Inner {
    mode: Mode,
    color: bool,
    quiet: bool,
    verbose: u8,
    json: bool,
    multi: MultiProgress,
}

impl Ui {
    /// Decides the mode from the terminal and the environment.
    pub fn new(quiet: bool, verbose: u8, json: bool) -> Self {
        let stderr_tty = Term::stderr().is_term();
        let mode = if stderr_tty && !envvars::is_set(envvars::CI) {
            Mode::Tty
        } else {
            Mode::Plain
        };
        let color = stderr_tty && !envvars::is_set(envvars::NO_COLOR);
        console::set_colors_enabled_stderr(color);
        console::set_colors_enabled(color && Term::stdout().is_term());
        Self::with_mode(mode, color, quiet, verbose, json)
    }

    pub fn with_mode(mode: Mode, color: bool, quiet: bool, verbose: u8, json: bool) -> Self {
        let multi = MultiProgress::with_draw_target(if mode == Mode::Tty && !quiet {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        Ui {
            inner: Arc::new(Inner {
                mode,
                color,
                quiet,
                verbose,
                json,
                multi,
            }),
        }
    }

    /// A silent printer for library use: no progress, no colour.
    pub fn silent() -> Self {
        Self::with_mode(Mode::Plain, false, true, 0, false)
    }

    pub fn mode(&self) -> Mode {
        self.inner.mode
    }
    pub fn json(&self) -> bool {
        self.inner.json
    }
    pub fn verbose(&self) -> u8 {
        self.inner.verbose
    }
    pub fn quiet(&self) -> bool {
        self.inner.quiet
    }

    fn style(&self, style: Style) -> Style {
        if self.inner.color {
            style
        } else {
            Style::new()
        }
    }

    /// Writes one line to stderr without tearing a running spinner.
    fn line(&self, text: &str) {
        if self.inner.mode == Mode::Tty {
            let _ = self.inner.multi.println(text);
        } else {
            stderr_line(text);
        }
    }

    /// Starts a progress step; finish it with [`Step::done`] or [`Step::fail`].
    pub fn step(&self, title: impl Into<String>) -> Step {
        let title = title.into();
        let bar = if self.inner.mode == Mode::Tty && !self.inner.quiet {
            let bar = self.inner.multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner:.cyan} {msg} {elapsed:.dim}")
                    .expect("static template"),
            );
            bar.set_message(title.clone());
            bar.enable_steady_tick(Duration::from_millis(100));
            Some(bar)
        } else {
            if !self.inner.quiet {
                stderr_line(&format!("• {title} ..."));
            }
            None
        };
        Step {
            ui: self.clone(),
            title,
            bar,
            started: Instant::now(),
            finished: false,
            last_progress: Default::default(),
            span: None,
        }
    }

    /// A progress line (hidden with `-q`).
    pub fn info(&self, message: impl Display) {
        if !self.inner.quiet {
            self.line(&message.to_string());
        }
    }

    /// Extra detail shown with `-v`.
    pub fn detail(&self, message: impl Display) {
        if !self.inner.quiet && self.inner.verbose > 0 {
            self.line(&format!(
                "  {}",
                self.style(Style::new().dim()).apply_to(message)
            ));
        }
    }

    pub fn warn(&self, message: impl Display) {
        let tag = self
            .style(Style::new().yellow().bold())
            .apply_to("warning:");
        self.line(&format!("{tag} {message}"));
    }

    /// Human output on stdout (tables, exports). Suppressed under `--json`.
    pub fn out(&self, text: impl Display) {
        if !self.inner.json {
            self.print(format_args!("{text}\n"));
        }
    }

    /// Machine output on stdout.
    pub fn emit_json(&self, value: &serde_json::Value) {
        let json = serde_json::to_string_pretty(value).expect("JSON values always serialize");
        self.print(format_args!("{json}\n"));
    }

    /// Writes `text` to stdout as it is, `--json` or not (raw output: a
    /// kubeconfig, exports); see [`write_stdout`] for a reader gone away
    /// and for a write that fails.
    pub fn print(&self, text: impl Display) {
        write_stdout(text.to_string().as_bytes());
    }

    /// Renders an error with its causes and hint to stderr.
    pub fn error(&self, err: &Error) {
        let _ = self.inner.multi.clear();
        stderr_line(&self.render_error(err));
    }

    pub fn render_error(&self, err: &Error) -> String {
        let red = self.style(Style::new().red().bold());
        let cyan = self.style(Style::new().cyan().bold());
        let mut out = format!("{} {}", red.apply_to("error:"), err.message());
        for cause in err.causes() {
            out.push_str(&format!("\n  caused by: {cause}"));
        }
        if let Some(hint) = err.hint() {
            out.push_str(&format!("\n{} {hint}", cyan.apply_to("hint:")));
        }
        out
    }

    pub fn check_mark(&self, ok: bool) -> String {
        if ok {
            self.style(Style::new().green()).apply_to("✓").to_string()
        } else {
            self.style(Style::new().red()).apply_to("✗").to_string()
        }
    }
}

pub struct Step {
    ui: Ui,
    title: String,
    bar: Option<ProgressBar>,
    started: Instant,
    finished: bool,
    /// The last sub-state printed as a plain line, so polls that report the
    /// same state do not repeat it.
    last_progress: std::sync::Mutex<String>,
    /// The step's span on the run's timeline, so that the work inside it
    /// can time its parts (`None`: nobody records this run).
    span: Option<(Timeline, usize)>,
}

impl Step {
    /// Records the step's parts under span `id` of `timeline`.
    pub fn with_span(mut self, timeline: Timeline, id: usize) -> Self {
        self.span = Some((timeline, id));
        self
    }

    /// Times a part of this step until the guard is finished or dropped.
    pub fn span(&self, name: impl Into<String>) -> SpanGuard {
        match &self.span {
            Some((timeline, id)) => timeline.span(name, Some(*id)),
            None => SpanGuard::none(),
        }
    }

    /// The timeline and this step's span, for parts timed after the fact.
    pub fn timeline(&self) -> Option<(&Timeline, usize)> {
        self.span.as_ref().map(|(t, id)| (t, *id))
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Updates the spinner text (a sub-state such as "waiting for node Ready").
    pub fn progress(&self, message: impl Display) {
        match &self.bar {
            Some(bar) => bar.set_message(format!("{} — {message}", self.title)),
            None => {
                let message = message.to_string();
                let mut last = self
                    .last_progress
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if *last != message {
                    self.ui.detail(format!("{}: {message}", self.title));
                    *last = message;
                }
            }
        }
    }

    fn finish(&mut self, mark: String, suffix: String) {
        self.finished = true;
        let line = format!(
            "{mark} {}{suffix} {}",
            self.title,
            self.ui
                .style(Style::new().dim())
                .apply_to(format_duration(self.started.elapsed()))
        );
        match self.bar.take() {
            Some(bar) => {
                bar.finish_and_clear();
                self.ui.inner.multi.remove(&bar);
                if !self.ui.inner.quiet {
                    let _ = self.ui.inner.multi.println(line);
                }
            }
            None if !self.ui.inner.quiet => stderr_line(&line),
            None => {}
        }
    }

    pub fn done(mut self, detail: impl Display) -> Duration {
        let detail = detail.to_string();
        let suffix = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        let mark = self.ui.check_mark(true);
        self.finish(mark, suffix);
        self.started.elapsed()
    }

    pub fn fail(mut self, reason: impl Display) {
        let mark = self.ui.check_mark(false);
        self.finish(mark, format!(": {reason}"));
    }

    pub fn skip(mut self, why: impl Display) {
        let mark = self.ui.style(Style::new().dim()).apply_to("-").to_string();
        self.finish(mark, format!(" (skipped: {why})"));
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if !self.finished {
            let mark = self.ui.check_mark(false);
            self.finish(mark, ": aborted".into());
        }
    }
}

/// Set once stdout's output has ended: its reader went away, or a write failed.
static STDOUT_ENDED: AtomicBool = AtomicBool::new(false);
/// Why a write to stdout failed (other than a reader gone away), for
/// [`stdout_failure`].
static STDOUT_FAILED: OnceLock<String> = OnceLock::new();

/// Everything the commands print on stdout is written here; `false` once
/// the output has ended, so that a writer that would go on forever (`logs
/// -f`) stops.
///
/// A reader that closes its end early (`devstack completions bash | head
/// -1`) has read all it wanted: that ends the output, not the command. The
/// standard `print!` panics on the EPIPE that follows (exit 101), and so do
/// writers that `expect` their writes (clap_complete's). The usual cure,
/// restoring SIGPIPE's default action, would let the signal kill devstack
/// in the middle of `up` or `down` (no rollback, no release of what it
/// holds) whenever any pipe it writes closes, and exit 141 instead of the
/// command's code; exiting at the first EPIPE would stop a command half-way
/// just the same. So from the first EPIPE on, output is dropped as if
/// written: the command finishes and exits with its own code (0 for one
/// that only prints).
///
/// Any other failure (a full disk, `> /dev/full`) loses output the user
/// asked for: the command still finishes, so that `up` is not stopped
/// half-way, its later output is dropped, and the binary reports the
/// failure once and exits non-zero ([`stdout_failure`]).
pub fn write_stdout(text: &[u8]) -> bool {
    if STDOUT_ENDED.load(Ordering::Relaxed) {
        return false;
    }
    // One lock for the whole text, so that lines printed by concurrent
    // tasks do not interleave.
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Ok(()) => true,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                let _ = STDOUT_FAILED.set(e.to_string());
            }
            STDOUT_ENDED.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// The failed write to stdout, if one failed other than by its reader
/// going away: the run lost output, and must not exit 0.
pub fn stdout_failure() -> Option<Error> {
    STDOUT_FAILED.get().map(stdout_error)
}

/// The error of a failed write to stdout (not a reader gone away).
pub fn stdout_error(why: impl Display) -> Error {
    Error::internal(format!("cannot write to stdout: {why}")).with_hint(
        "the output is incomplete: free space where stdout goes (`df`), or send it elsewhere",
    )
}

/// One line to stderr. Unlike `eprintln!`, a closed stderr (`2>&1 | head`)
/// is no panic: there is nobody left to tell.
fn stderr_line(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{}ms", d.as_millis())
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// A plain-text table for stdout: columns as wide as their widest cell, the
/// last one unpadded, no trailing spaces; `Display` renders it.
#[derive(Debug, Clone)]
pub struct Table {
    header: Option<Vec<String>>,
    rows: Vec<(Option<String>, Vec<String>)>,
    columns: Vec<Column>,
    indent: usize,
}

#[derive(Debug, Clone, Copy)]
struct Column {
    min_width: usize,
    right_aligned: bool,
    /// Spaces before the column (none before the first).
    gap: usize,
}

impl Table {
    /// A table whose first line names its columns.
    pub fn new(header: &[&str]) -> Table {
        let mut table = Table::headless(header.len());
        table.header = Some(header.iter().map(|h| h.to_string()).collect());
        table
    }

    /// A table without a header line, such as a list of keys and values.
    pub fn headless(columns: usize) -> Table {
        Table {
            header: None,
            rows: Vec::new(),
            columns: vec![
                Column {
                    min_width: 0,
                    right_aligned: false,
                    gap: 2,
                };
                columns
            ],
            indent: 0,
        }
    }

    /// Every line starts with `width` spaces; a marked row's mark takes the first.
    pub fn indent(mut self, width: usize) -> Table {
        self.indent = width;
        self
    }

    /// Spaces between every two columns (2 unless set).
    pub fn gap(mut self, spaces: usize) -> Table {
        for column in &mut self.columns {
            column.gap = spaces;
        }
        self
    }

    /// Spaces before column `column` only.
    pub fn gap_before(mut self, column: usize, spaces: usize) -> Table {
        self.columns[column].gap = spaces;
        self
    }

    /// Columns at least this wide, however narrow their cells.
    pub fn min_widths(mut self, widths: &[usize]) -> Table {
        for (column, width) in self.columns.iter_mut().zip(widths) {
            column.min_width = *width;
        }
        self
    }

    /// Cells of `column` (numbers, sizes) aligned to the right.
    pub fn right_aligned(mut self, column: usize) -> Table {
        self.columns[column].right_aligned = true;
        self
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push((None, cells.into_iter().map(Into::into).collect()));
    }

    /// A row whose indent starts with `mark`, a symbol one column wide (✓, ✗).
    pub fn marked_row<S: Into<String>>(
        &mut self,
        mark: impl Into<String>,
        cells: impl IntoIterator<Item = S>,
    ) {
        self.rows.push((
            Some(mark.into()),
            cells.into_iter().map(Into::into).collect(),
        ));
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.min_width).collect();
        let lines = self
            .header
            .iter()
            .chain(self.rows.iter().map(|(_, cells)| cells));
        for cells in lines {
            for (width, cell) in widths.iter_mut().zip(cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        widths
    }

    fn line(&self, mark: Option<&str>, cells: &[String], widths: &[usize]) -> String {
        let mut out = match mark {
            Some(mark) => format!("{mark}{}", " ".repeat(self.indent.saturating_sub(1))),
            None => " ".repeat(self.indent),
        };
        let last = self.columns.len().saturating_sub(1);
        for (i, (column, width)) in self.columns.iter().zip(widths).enumerate() {
            if i > 0 {
                out.push_str(&" ".repeat(column.gap));
            }
            let cell = cells.get(i).map_or("", String::as_str);
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            match (column.right_aligned, i == last) {
                (true, _) => out.push_str(&format!("{pad}{cell}")),
                (false, true) => out.push_str(cell),
                (false, false) => out.push_str(&format!("{cell}{pad}")),
            }
        }
        out.trim_end().to_string()
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let widths = self.widths();
        let header = self
            .header
            .iter()
            .map(|cells| self.line(None, cells, &widths));
        let rows = self
            .rows
            .iter()
            .map(|(mark, cells)| self.line(mark.as_deref(), cells, &widths));
        let lines: Vec<String> = header.chain(rows).collect();
        f.write_str(&lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_fit_their_widest_cell_and_the_last_is_unpadded() {
        let mut table = Table::new(&["NAME", "STATE", "DETAIL"]);
        table.row(["cluster", "ok", "k3s, 1 node(s)"]);
        table.row(["localstack-container", "missing", ""]);
        assert_eq!(
            table.to_string(),
            "NAME                  STATE    DETAIL\n\
             cluster               ok       k3s, 1 node(s)\n\
             localstack-container  missing"
        );
    }

    #[test]
    fn marks_take_the_indent_and_the_header_is_indented() {
        let mut table = Table::new(&["A", "B"]).indent(2);
        table.marked_row("✓", ["x", "y"]);
        table.marked_row("✗", ["long", "z"]);
        assert_eq!(table.to_string(), "  A     B\n✓ x     y\n✗ long  z");
    }

    #[test]
    fn minimum_widths_gaps_and_right_alignment() {
        let mut table = Table::new(&["NAME", "SIZE", "IMAGE"])
            .gap(1)
            .gap_before(2, 2)
            .min_widths(&[6, 8])
            .right_aligned(1);
        table.row(["a", "1.0 MiB", "img"]);
        table.row(["longer-name", "12.5 MiB", "?"]);
        assert_eq!(
            table.to_string(),
            "NAME            SIZE  IMAGE\n\
             a            1.0 MiB  img\n\
             longer-name 12.5 MiB  ?"
        );
    }

    #[test]
    fn a_headless_table_lists_keys_and_values() {
        let mut table = Table::headless(2).indent(2);
        table.row(["default", "v1"]);
        table.row(["newest upstream", "v2"]);
        assert_eq!(
            table.to_string(),
            "  default          v1\n  newest upstream  v2"
        );
    }
}
