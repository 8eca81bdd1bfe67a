//! The workspace's layout, read from the sources on every run: a file a reader can take in,
//! functions that each do one stage, and crate roots that only wire their modules.
//!
//! - No file in `crates/*/src` holds more than [`FILE_MAX`] lines before its `#[cfg(test)]`
//!   module, except [`LONG_FILES`], each with why.
//! - No function is longer than [`FN_MAX`] lines, signature to closing brace.
//! - No module imports an item from its crate root that the root takes back from it: what a
//!   crate's modules share lives in a module of its own (the circle check of `modules.rs`,
//!   with every crate's root in the graph).

use std::path::{Path, PathBuf};

/// The most lines a file holds before its tests.
const FILE_MAX: usize = 600;
/// The most lines a function holds.
const FN_MAX: usize = 100;
/// Files allowed past [`FILE_MAX`], with why.
const LONG_FILES: [(&str, &str); 0] = [];

/// Every `.rs` file under each crate's `src`.
fn sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = std::fs::read_dir(&crates).unwrap().filter_map(Result::ok).map(|k| k.path().join("src")).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A file's path from `crates/`.
fn shown(path: &Path) -> String {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    path.canonicalize().unwrap().strip_prefix(&crates).unwrap().display().to_string()
}

/// The lines before the file's top-level `#[cfg(test)]`, or all of them.
fn before_tests(text: &str) -> Vec<&str> {
    text.lines().take_while(|l| *l != "#[cfg(test)]").collect()
}

/// Source text with comments and string and char literals blanked to spaces, every line kept
/// where it was.
pub(crate) fn blanked(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let blank = |out: &mut Vec<u8>, from: &[u8]| out.extend(from.iter().map(|c| if *c == b'\n' { b'\n' } else { b' ' }));
    while i < b.len() {
        let start = i;
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (i == 0 || !ident(b[i - 1]))
            && b[i + 1..].iter().position(|c| *c != b'#').is_some_and(|n| b[i + 1 + n] == b'"')
        {
            let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i = (i + close.len()).min(b.len());
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else if b[i] == b'\'' && (b.get(i + 1) == Some(&b'\\') || b.get(i + 2) == Some(&b'\'')) {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else {
            out.push(b[i]);
            i += 1;
            continue;
        }
        blank(&mut out, &b[start..i.min(b.len())]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every function with a body in `code` (blanked), as (name, first line, lines long).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("fn ") {
        let start = at + found;
        at = start + 3;
        if start > 0 && ident(b[start - 1]) {
            continue;
        }
        let name: String = code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first brace outside the signature's brackets; a `;` first is a
        // declaration without one.
        let (mut depth, mut open) = (0i32, None);
        for (n, c) in code[at..].char_indices() {
            match c {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' => depth -= 1,
                '>' if !code[..at + n].ends_with('-') && !code[..at + n].ends_with('=') => depth -= 1,
                ';' if depth <= 0 => break,
                '{' if depth <= 0 => {
                    open = Some(at + n);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut level = 0;
        let mut close = code.len();
        for (n, c) in code[open..].char_indices() {
            match c {
                '{' => level += 1,
                '}' => {
                    level -= 1;
                    if level == 0 {
                        close = open + n;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((name, line_of(start), line_of(close) - line_of(start) + 1));
    }
    out
}

#[test]
fn layout_no_file_is_past_600_lines_before_its_tests_and_no_function_past_100() {
    let mut long_files = Vec::new();
    let mut long_fns = Vec::new();
    let files = sources();
    assert!(files.len() > 100, "read too few files: the walk is broken");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let lines = before_tests(&text);
        let name = shown(path);
        if lines.len() > FILE_MAX && !LONG_FILES.iter().any(|(f, _)| *f == name) {
            long_files.push(format!("{name}: {} lines", lines.len()));
        }
        for (f, line, len) in functions(&blanked(&lines.join("\n"))) {
            if len > FN_MAX {
                long_fns.push(format!("{name}:{line} {f}: {len} lines"));
            }
        }
    }
    println!("layout: {} files read; {} past {FILE_MAX} lines, {} functions past {FN_MAX}", files.len(), long_files.len(), long_fns.len());
    assert!(long_files.is_empty() && long_fns.is_empty(), "too long:\n{}\n{}", long_files.join("\n"), long_fns.join("\n"));
}

#[test]
fn layout_the_function_measure_finds_bodies_and_skips_declarations_and_words_in_strings() {
    let code = blanked(
        "trait T { fn declared(&self) -> Vec<u8>; }\nfn one() -> Result<(), E> {\n    let s = \"fn not_one() {\";\n    {\n    }\n}\nimpl X {\n    pub async fn two<F: Fn() -> u8>(f: F) where F: Send {\n        f();\n    }\n}\n",
    );
    assert_eq!(functions(&code), vec![("one".to_owned(), 2, 5), ("two".to_owned(), 8, 3)]);
}
