//! Text: what leaves the daemon, and the suggestions its errors make.
//!
//! A process names itself (`comm`, set with
//! prctl(PR_SET_NAME) by any user) and bloatd prints that name in
//! `bloatd sockets`, `bloatd top` and the API: a name made of terminal
//! escape sequences must reach no terminal. Every string taken from the
//! kernel goes through [`printable`] on its way into the socket tracker.

/// `s` with every control character (C0, DEL, C1: ESC starts a terminal
/// sequence, CR and BS overwrite what was printed) and every bidirectional
/// formatting character (which reorders what a reader sees) replaced by `?`.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || is_bidi_control(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text from the kernel (a command name, an interface or algorithm name)
/// up to its NUL.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]);
    // Nearly every name is printable ASCII, which `printable` keeps as it
    // is: taken without a pass over its characters (a quarter of making a
    // socket's view).
    if s.bytes().all(|c| (0x20..0x7f).contains(&c)) {
        return s.into_owned();
    }
    printable(&s)
}

/// Levenshtein distance, for "did you mean".
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{cstr, printable};

    #[test]
    fn kernel_text_ends_at_its_nul_and_is_made_printable() {
        assert_eq!(cstr(b"curl\0\0junk"), "curl");
        assert_eq!(cstr(b"no nul at all"), "no nul at all");
        assert_eq!(cstr(b"\x1b]0;pwned\x07\0"), "?]0;pwned?");
        assert_eq!(cstr(b"tab\there\x7f"), "tab?here?");
        assert_eq!(cstr("système\0".as_bytes()), "système");
        assert_eq!(cstr(b"bad\xff\0"), "bad\u{fffd}");
    }

    #[test]
    fn escapes_and_controls_become_question_marks() {
        assert_eq!(printable("\x1b]0;pwned\x07curl"), "?]0;pwned?curl");
        assert_eq!(printable("a\rb\x08\x7f\u{9b}c"), "a?b???c");
        assert_eq!(printable("ev\u{202e}lif"), "ev?lif");
    }

    #[test]
    fn ordinary_names_pass_unchanged() {
        for s in ["iperf3", "kworker/0:1", "Web Content", "système"] {
            assert_eq!(printable(s), s);
        }
    }
}
