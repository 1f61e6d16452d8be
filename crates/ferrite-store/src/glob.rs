//! Redis-style glob matching over bytes, for `find` with the glob kind (and so RESP `SCAN MATCH`).
//!
//! `*` matches any run of bytes, `?` any one byte, `[abc]` / `[a-z]` / `[^abc]` one byte of (or
//! not of) a class, and `\x` the byte `x` literally. An unclosed `[` matches itself.

/// Whether `pattern` matches the whole of `text`.
///
/// Runs in O(pattern × text) at worst: on a mismatch it backtracks only to the most recent `*`,
/// which is enough for globs because every other token consumes exactly one byte.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the most recent `*`: (pattern index after it, text index it took).
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if let Some(step) = match_one(pattern, p, text[t]) {
            match step {
                Step::Star => {
                    star = Some((p + 1, t));
                    p += 1;
                }
                Step::Consumed(next) => {
                    p = next;
                    t += 1;
                }
            }
            continue;
        }
        match star {
            Some((after_star, taken)) => {
                p = after_star;
                t = taken + 1;
                star = Some((after_star, taken + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}

enum Step {
    /// The token at the pattern position is `*`.
    Star,
    /// The token matched one byte; the next token starts at this pattern index.
    Consumed(usize),
}

/// Matches the token at `pattern[p]` against `byte`; `None` on a mismatch or at the pattern's end.
fn match_one(pattern: &[u8], p: usize, byte: u8) -> Option<Step> {
    match *pattern.get(p)? {
        b'*' => Some(Step::Star),
        b'?' => Some(Step::Consumed(p + 1)),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == byte).then_some(Step::Consumed(p + 2)),
        b'[' => match match_class(pattern, p + 1, byte) {
            Some((matched, next)) => matched.then_some(Step::Consumed(next)),
            None => (byte == b'[').then_some(Step::Consumed(p + 1)),
        },
        literal => (literal == byte).then_some(Step::Consumed(p + 1)),
    }
}

/// Matches `byte` against the class starting at `pattern[start]` (just after `[`). Returns whether
/// it matched and the index after the closing `]`, or `None` if the class is never closed.
fn match_class(pattern: &[u8], start: usize, byte: u8) -> Option<(bool, usize)> {
    let mut i = start;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        let mut low = pattern[i];
        if low == b'\\' && i + 1 < pattern.len() {
            i += 1;
            low = pattern[i];
        }
        if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() && pattern[i + 2] != b']' {
            let high = pattern[i + 2];
            let (low, high) = if low <= high { (low, high) } else { (high, low) };
            matched |= (low..=high).contains(&byte);
            i += 3;
        } else {
            matched |= low == byte;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_like_redis() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("user:*", "user:42", true),
            ("user:*", "users:42", false),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
            ("[abc", "[abc", true),
            ("", "", true),
            ("", "x", false),
            ("x**", "x", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_match(pattern.as_bytes(), text.as_bytes()), *expected, "{pattern} ~ {text}");
        }
    }
}
