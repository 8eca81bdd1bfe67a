//! A line diff, for showing what the last edit of the persona or owner settings changed.

/// One line of a diff: kept (`' '`), removed (`'-'`) or added (`'+'`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DiffLine {
    pub op: char,
    pub line: String,
}

/// The lines of `before` and `after` in order, each marked kept, removed or added (a longest
/// common subsequence; the texts are a few dozen lines).
pub fn lines(before: &str, after: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut common = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    let mut push = |op: char, line: &str| out.push(DiffLine { op, line: line.to_owned() });
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            push(' ', a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || common[i + 1][j] >= common[i][j + 1]) {
            push('-', a[i]);
            i += 1;
        } else {
            push('+', b[j]);
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_shows_as_removed_then_added_between_kept_ones() {
        let d = lines("a\nb\nc", "a\nB\nc\nd");
        let marks: String = d.iter().map(|l| l.op).collect();
        assert_eq!(marks, " -+ +");
        assert_eq!(d[2].line, "B");
        assert_eq!(lines("", "x")[0], DiffLine { op: '+', line: "x".into() });
    }
}
