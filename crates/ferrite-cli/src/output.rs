//! Rendering results: aligned tables and field lists for people, one JSON document for programs.

use std::io::{self, Write};

/// What a command produced, in both renderings; `main` prints the one the user asked for.
#[derive(Debug)]
pub struct Report {
    pub human: Human,
    pub json: serde_json::Value,
}

/// The human rendering of a report.
#[derive(Debug)]
pub enum Human {
    /// Text, printed with a final newline.
    Text(String),
    /// Bytes written exactly as they are (a value from `get`), so `ferrite get p k > file`
    /// round-trips binary data.
    Raw(Vec<u8>),
}

impl Report {
    pub fn text(text: impl Into<String>, json: serde_json::Value) -> Report {
        Report { human: Human::Text(text.into()), json }
    }

    pub fn raw(bytes: Vec<u8>, json: serde_json::Value) -> Report {
        Report { human: Human::Raw(bytes), json }
    }

    /// Writes the report to `out`: pretty JSON if `json`, the human rendering otherwise.
    pub fn write(&self, json: bool, out: &mut impl Write) -> io::Result<()> {
        if json {
            serde_json::to_writer_pretty(&mut *out, &self.json)?;
            out.write_all(b"\n")?;
        } else {
            match &self.human {
                Human::Text(text) if text.is_empty() => {}
                Human::Text(text) if text.ends_with('\n') => out.write_all(text.as_bytes())?,
                Human::Text(text) => writeln!(out, "{text}")?,
                Human::Raw(bytes) => out.write_all(bytes)?,
            }
        }
        out.flush()
    }
}

/// A table with a header row, columns padded to their widest cell.
#[derive(Debug)]
pub struct Table {
    headers: Vec<String>,
    /// Numbers read best right-aligned, so their digits line up.
    right_aligned: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// `columns` are (header, right-aligned) pairs.
    pub fn new(columns: &[(&str, bool)]) -> Table {
        Table {
            headers: columns.iter().map(|(header, _)| (*header).to_owned()).collect(),
            right_aligned: columns.iter().map(|(_, right)| *right).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "a table row has one cell per column");
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                let pad = widths[column] - cell.chars().count();
                if self.right_aligned[column] {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `name  value` lines with the values aligned, for one object's properties.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(name, _)| name.chars().count()).max().unwrap_or(0);
    pairs.iter().map(|(name, value)| format!("{name:<width$}  {value}\n")).collect()
}

/// A byte count for people: exact below 1 KiB, otherwise in the largest binary unit that keeps
/// the number at least 1, with one decimal unless it is whole.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut unit = 0;
    let mut scale = 1024u64;
    while unit + 1 < UNITS.len() && bytes / scale >= 1024 {
        unit += 1;
        scale *= 1024;
    }
    if bytes.is_multiple_of(scale) {
        format!("{} {}", bytes / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", bytes as f64 / scale as f64, UNITS[unit])
    }
}

/// Nanoseconds since the Unix epoch as RFC 3339 UTC with nanoseconds. Hand-written (Howard
/// Hinnant's days-to-civil algorithm) to avoid a date crate for one conversion.
pub fn format_timestamp_ns(ns: u64) -> String {
    let seconds = ns / 1_000_000_000;
    let nanos = ns % 1_000_000_000;
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    // Shift the epoch to 0000-03-01 so leap days fall at the end of each 400-year era.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Bytes as a JSON value: a string if they are UTF-8, otherwise lowercase hex, with the
/// encoding named so a program can tell which.
pub fn bytes_json(bytes: &[u8]) -> (serde_json::Value, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (serde_json::Value::from(text), "utf8"),
        Err(_) => (serde_json::Value::from(hex(bytes)), "hex"),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_pad_columns_and_right_align_numbers() {
        let mut table = Table::new(&[("NAME", false), ("OBJECTS", true), ("SIZE", false)]);
        table.row(vec!["demo".into(), "3".into(), "64 MiB".into()]);
        table.row(vec!["a-longer-name".into(), "12345678".into(), "1 GiB".into()]);
        assert_eq!(
            table.render(),
            "NAME            OBJECTS  SIZE\n\
             demo                  3  64 MiB\n\
             a-longer-name  12345678  1 GiB\n"
        );
    }

    #[test]
    fn empty_table_is_just_its_header() {
        assert_eq!(Table::new(&[("NAME", false), ("N", true)]).render(), "NAME  N\n");
    }

    #[test]
    fn fields_align_their_values() {
        let text = fields(&[("pool", "demo".into()), ("objects", "3".into())]);
        assert_eq!(text, "pool     demo\nobjects  3\n");
    }

    #[test]
    fn byte_counts_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1 KiB");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(64 << 20), "64 MiB");
        assert_eq!(format_bytes(3 << 30), "3 GiB");
        assert_eq!(format_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(format_timestamp_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(format_timestamp_ns(1_700_000_000_123_456_789), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(format_timestamp_ns(951_782_400 * 1_000_000_000), "2000-02-29T00:00:00.000000000Z");
        assert_eq!(format_timestamp_ns(4_102_444_799 * 1_000_000_000), "2099-12-31T23:59:59.000000000Z");
    }

    #[test]
    fn reports_render_text_raw_or_json() {
        let report = Report::text("3", json!({ "count": 3 }));
        let mut out = Vec::new();
        report.write(false, &mut out).expect("write to a Vec");
        assert_eq!(out, b"3\n");
        out.clear();
        report.write(true, &mut out).expect("write to a Vec");
        assert_eq!(String::from_utf8(out).expect("JSON is UTF-8"), "{\n  \"count\": 3\n}\n");

        let mut out = Vec::new();
        Report::raw(vec![0, 159, 10], json!(null)).write(false, &mut out).expect("write to a Vec");
        assert_eq!(out, [0, 159, 10], "raw values get no newline added");
    }

    #[test]
    fn binary_values_become_hex_in_json() {
        assert_eq!(bytes_json(b"hi"), (json!("hi"), "utf8"));
        assert_eq!(bytes_json(&[0xff, 0x00]), (json!("ff00"), "hex"));
    }
}
