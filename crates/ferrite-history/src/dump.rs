//! The whole history, for debugging a failed run: as text (one operation a line, as reports print
//! them) or as JSON lines for tools.

use std::io;

use serde_json::{json, Value as Json};

use crate::bytes::{escaped, Value};
use crate::history::{History, Op, OpRecord, Outcome, Ret, Stamp};

impl History {
    /// Every operation, one a line, in invocation order.
    pub fn dump_text(&self) -> String {
        self.ops().iter().map(|record| format!("{record}\n")).collect()
    }

    /// Every operation as one JSON object a line, in invocation order. Keys and values are
    /// strings with bytes that are not printable ASCII escaped as `\xNN` (and `"`, `\` escaped);
    /// an absent value is `null`. Fields: `id`, `client`, `key`, `op` (`read`, `write`, `erase`,
    /// `compare-and-set`), `value` (write), `expected` and `new` (compare-and-set), `outcome`
    /// (`pending`, `ok`, `failed`, `unknown`), `returned` (ok read: the value; ok
    /// compare-and-set: whether it swapped), `invoked` and `completed` (`seq`, `elapsed_us`).
    pub fn write_json_lines(&self, mut out: impl io::Write) -> io::Result<()> {
        for record in self.ops() {
            serde_json::to_writer(&mut out, &record_json(&record))?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

fn record_json(record: &OpRecord) -> Json {
    let mut line = json!({
        "id": record.id,
        "client": record.client,
        "key": escaped(record.key.as_bytes()),
        "op": record.op.kind().to_string(),
        "invoked": stamp_json(record.invoked),
        "completed": record.completed.map(stamp_json),
    });
    match &record.op {
        Op::Read | Op::Erase => {}
        Op::Write(value) => line["value"] = content_json(Some(value)),
        Op::CompareAndSet { expected, new } => {
            line["expected"] = content_json(expected.as_ref());
            line["new"] = content_json(Some(new));
        }
    }
    line["outcome"] = json!(match record.outcome {
        Outcome::Pending => "pending",
        Outcome::Ok(_) => "ok",
        Outcome::Failed => "failed",
        Outcome::Unknown => "unknown",
    });
    match &record.outcome {
        Outcome::Ok(Ret::Read(value)) => line["returned"] = content_json(value.as_ref()),
        Outcome::Ok(Ret::Swapped(swapped)) => line["returned"] = json!(swapped),
        _ => {}
    }
    line
}

fn content_json(value: Option<&Value>) -> Json {
    value.map_or(Json::Null, |value| json!(escaped(value.as_bytes())))
}

fn stamp_json(stamp: Stamp) -> Json {
    json!({ "seq": stamp.seq, "elapsed_us": u64::try_from(stamp.elapsed.as_micros()).unwrap_or(u64::MAX) })
}

#[cfg(test)]
mod tests {
    use crate::history::{History, Op, Ret};

    /// One JSON object per operation, carrying what it asked and what it returned.
    #[test]
    fn json_lines_carry_each_operation() {
        let history = History::new();
        history.invoke(7, "k", Op::Write("a\n".into())).ok(Ret::Done);
        history.invoke(8, "k", Op::Read).ok(Ret::Read(None));
        let mut out = Vec::new();
        history.write_json_lines(&mut out).expect("writing to a Vec cannot fail");
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .expect("JSON is UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["client"], 7);
        assert_eq!(lines[0]["value"], "a\\n");
        assert_eq!(lines[0]["completed"]["seq"], 1);
        assert_eq!(lines[1]["op"], "read");
        assert_eq!(lines[1]["outcome"], "ok");
        assert!(lines[1]["returned"].is_null());
        assert_eq!(history.dump_text().lines().count(), 2);
    }
}
