//! The screen: colour when stdout is a terminal (and `NO_COLOR` is unset), plain text
//! otherwise; times as "3m ago"; conditions and events in one layout for every kind.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use jiff::Timestamp;

use crate::status::{ConditionLine, EventLine, since};

/// Whether to colour, and how.
#[derive(Clone, Copy, Debug, Default)]
pub struct Paint {
    colour: bool,
}

impl Paint {
    pub fn for_stdout() -> Paint {
        Paint { colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() }
    }

    fn code(&self, code: &str, text: &str) -> String {
        if self.colour { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }

    pub fn bold(&self, text: &str) -> String {
        self.code("1", text)
    }
    pub fn good(&self, text: &str) -> String {
        self.code("32", text)
    }
    pub fn warn(&self, text: &str) -> String {
        self.code("33", text)
    }
    pub fn bad(&self, text: &str) -> String {
        self.code("31", text)
    }

    /// A state word coloured by what it says.
    pub fn state(&self, text: &str) -> String {
        let lower = text.to_lowercase();
        let bad = ["=false", "failed", "error", "lost", "unreachable", "crashloop", "not "];
        let good = ["=true", "running", "ready", "succeeded", "bound", "active", "streaming", "yes"];
        if bad.iter().any(|w| lower.contains(w)) {
            self.bad(text)
        } else if good.iter().any(|w| lower.contains(w)) {
            self.good(text)
        } else {
            self.warn(text)
        }
    }
}

/// `time` as "42s ago", "3m ago", "5h ago", "2d ago" (or "in 3d" ahead).
pub fn ago(time: Timestamp) -> String {
    let seconds = Timestamp::now().as_second() - time.as_second();
    let (n, ahead) = (seconds.unsigned_abs(), seconds < 0);
    let span = match n {
        0..120 => format!("{n}s"),
        120..7200 => format!("{}m", n / 60),
        7200..172_800 => format!("{}h", n / 3600),
        _ => format!("{}d", n / 86_400),
    };
    if ahead { format!("in {span}") } else { format!("{span} ago") }
}

/// Bytes as a person reads them.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

pub fn conditions(out: &mut String, paint: &Paint, conditions: &[ConditionLine]) {
    let _ = writeln!(out, "\n{}", paint.bold("Conditions"));
    if conditions.is_empty() {
        let _ = writeln!(out, "  none yet");
    }
    for c in conditions {
        let state = format!("{:<28}", format!("{}={}", c.type_, c.status));
        let _ =
            writeln!(out, "  {} {:<26} {:>8}  {}", paint.state(&state), c.reason, since(c.since.as_deref()), c.message);
    }
}

pub fn events(out: &mut String, paint: &Paint, events: &[EventLine]) {
    let _ = writeln!(out, "\n{}", paint.bold("Recent events"));
    if events.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for e in events {
        let padded = format!("{:<7}", e.type_);
        let type_ = if e.type_ == "Warning" { paint.bad(&padded) } else { padded };
        let count = if e.count > 1 { format!(" (x{})", e.count) } else { String::new() };
        let _ = writeln!(
            out,
            "  {:>8}  {}  {:<22} {:<26} {}{count}",
            since(e.time.as_deref()),
            type_,
            e.object,
            e.reason,
            e.message
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_sizes_read_as_a_person_says_them() {
        let now = Timestamp::now();
        let before = |s: i64| now.checked_sub(jiff::SignedDuration::from_secs(s)).unwrap();
        assert_eq!(ago(before(5)), "5s ago");
        assert_eq!(ago(before(600)), "10m ago");
        assert_eq!(ago(before(3 * 3600)), "3h ago");
        assert_eq!(ago(before(3 * 86_400)), "3d ago");
        assert_eq!(ago(before(-40 * 86_400 - 30)), "in 40d");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(16 * 1024 * 1024), "16.0 MiB");
    }

    #[test]
    fn plain_output_has_no_escape_codes() {
        let plain = Paint::default();
        assert_eq!(plain.state("Ready=True"), "Ready=True");
        let colour = Paint { colour: true };
        assert_eq!(colour.state("Ready=True"), "\x1b[32mReady=True\x1b[0m");
        assert_eq!(colour.state("Ready=False"), "\x1b[31mReady=False\x1b[0m");
        assert_eq!(colour.state("Progressing"), "\x1b[33mProgressing\x1b[0m");
    }
}
