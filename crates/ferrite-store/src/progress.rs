//! Saying how far a long job over a shard's files has gone: an online backup's copy, `ferrite
//! check`, a restore's copy and its verification. The jobs count the bytes they have done; this
//! decides when and where that is shown, the same way for the server and the `ferrite` command.
//!
//! Small jobs show nothing (below [`PROGRESS_BYTES_DEFAULT`], or the number of bytes in the
//! environment variable [`PROGRESS_BYTES_ENV`]). On a terminal the line is redrawn in place a few
//! times a second; elsewhere (a log, a pipe) a line is written at each tenth of the job only, so
//! that a large job adds ten lines, not thousands.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Jobs over less data than this show no progress.
pub const PROGRESS_BYTES_DEFAULT: u64 = 64 << 20;

/// The environment variable that replaces [`PROGRESS_BYTES_DEFAULT`] (a number of bytes).
pub const PROGRESS_BYTES_ENV: &str = "FERRITE_PROGRESS_BYTES";

/// How often a terminal's line is redrawn at most.
const REDRAW_INTERVAL: Duration = Duration::from_millis(250);

/// Where progress goes.
enum Output {
    /// Standard error, a terminal: one line redrawn in place.
    Terminal,
    /// Standard error elsewhere: a line per tenth.
    Lines,
    /// A function that writes a line per tenth where it wants (a log).
    Report(Box<dyn FnMut(&str) + Send>),
}

/// The progress of one job over `total` bytes.
pub struct Progress {
    what: String,
    total: u64,
    done: u64,
    /// Tenths of the job already reported (lines and reports).
    tenths: u64,
    drawn: Option<Instant>,
    output: Option<Output>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("what", &self.what)
            .field("total", &self.total)
            .field("done", &self.done)
            .finish()
    }
}

impl Progress {
    /// The progress of `what` over `total` bytes on standard error: redrawn in place when
    /// standard error is a terminal, a line per tenth when `asked` (`--progress`) and it is not;
    /// nothing when neither applies, or for a small job.
    pub fn on_stderr(what: impl Into<String>, total: u64, asked: bool) -> Progress {
        let output =
            if std::io::stderr().is_terminal() { Some(Output::Terminal) } else { asked.then_some(Output::Lines) };
        Progress::with(what.into(), total, output)
    }

    /// The progress of `what` over `total` bytes, given to `report` as a line per tenth; nothing
    /// for a small job.
    pub fn reported(what: impl Into<String>, total: u64, report: impl FnMut(&str) + Send + 'static) -> Progress {
        Progress::with(what.into(), total, Some(Output::Report(Box::new(report))))
    }

    /// No progress shown.
    pub fn silent() -> Progress {
        Progress::with(String::new(), 0, None)
    }

    fn with(what: String, total: u64, output: Option<Output>) -> Progress {
        let output = output.filter(|_| total >= threshold_bytes());
        Progress { what, total, done: 0, tenths: 0, drawn: None, output }
    }

    /// Counts `bytes` more done, and shows it if it is time to.
    pub fn advance(&mut self, bytes: u64) {
        self.done = self.done.saturating_add(bytes).min(self.total);
        let tenths = self.done.saturating_mul(10) / self.total.max(1);
        let line = self.line();
        match &mut self.output {
            None => {}
            Some(Output::Terminal) if self.drawn.is_none_or(|drawn| drawn.elapsed() >= REDRAW_INTERVAL) => {
                self.drawn = Some(Instant::now());
                // Progress is a courtesy: a closed standard error does not stop the job.
                let _ = write!(std::io::stderr(), "\r{line}\x1b[K");
            }
            Some(Output::Lines) if tenths > self.tenths => {
                self.tenths = tenths;
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            Some(Output::Report(report)) if tenths > self.tenths => {
                self.tenths = tenths;
                report(&line);
            }
            Some(_) => {}
        }
    }

    /// Shows the job as done: the last tenth if it was not shown yet, and ends a terminal's
    /// line.
    pub fn finish(&mut self) {
        self.advance(self.total - self.done);
        if let Some(Output::Terminal) = self.output {
            let _ = writeln!(std::io::stderr(), "\r{}\x1b[K", self.line());
        }
    }

    fn line(&self) -> String {
        const MIB: f64 = (1 << 20) as f64;
        let percent = self.done.saturating_mul(100) / self.total.max(1);
        format!("{}: {:.1} of {:.1} MiB ({percent}%)", self.what, self.done as f64 / MIB, self.total as f64 / MIB)
    }
}

/// The size from which a job shows progress.
fn threshold_bytes() -> u64 {
    std::env::var(PROGRESS_BYTES_ENV).ok().and_then(|bytes| bytes.parse().ok()).unwrap_or(PROGRESS_BYTES_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A report gets a line at each tenth and no more, however small the steps.
    #[test]
    fn a_report_gets_a_line_per_tenth() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let total = PROGRESS_BYTES_DEFAULT.max(threshold_bytes()) * 2;
        let mut progress =
            Progress::reported("copying", total, move |line| seen.lock().expect("lines").push(line.to_owned()));
        for _ in 0..1000 {
            progress.advance(total / 1000);
        }
        progress.finish();
        let lines = lines.lock().expect("lines");
        assert_eq!(lines.len(), 10, "{lines:?}");
        assert!(lines[0].starts_with("copying: ") && lines[0].ends_with("(10%)"), "{lines:?}");
        assert!(lines[9].ends_with("(100%)"), "{lines:?}");
    }

    /// A job below the threshold says nothing.
    #[test]
    fn a_small_job_says_nothing() {
        let lines = Arc::new(Mutex::new(0));
        let seen = Arc::clone(&lines);
        let mut progress = Progress::reported("copying", 1, move |_| *seen.lock().expect("count") += 1);
        progress.finish();
        assert_eq!(*lines.lock().expect("count"), usize::from(threshold_bytes() <= 1));
    }
}
