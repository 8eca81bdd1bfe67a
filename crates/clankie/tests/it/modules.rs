//! The workspace's module graph: no file imports another that imports it back, directly or
//! through a chain. A circle of files is a knot every addition lands in; layers keep a crate
//! readable one file at a time.
//!
//! The graph is read from the sources: file A depends on file B when A names an item B
//! defines, through a `use` (`crate::…`, `super::…`, `self::…` or a child module) or a path in
//! its code. A name a module only re-exports is followed to the file that defines it, and
//! `mod` and `pub use` lines are wiring, not dependence. Test modules (`#[cfg(test)]`) are left
//! out. The crate root wires every module, so it is left out too, except in the crates built
//! as layers, whose root must import nothing that imports it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates built in layers: their root (`lib.rs`) is in the graph too.
const LAYERED: [&str; 2] = ["clankie-discord-loopback", "clankie-voice-body"];

type ModPath = Vec<String>;

/// Source text with comments, string and char literals blanked and `#[cfg(test)]` items removed.
fn code_of(text: &str) -> String {
    without_test_items(&crate::layout::blanked(text))
}

fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let brace = after.find('{');
        let semi = after.find(';');
        match (brace, semi) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                let mut depth = 0;
                let mut end = after.len();
                for (n, c) in after[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + n + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            (_, Some(s)) => rest = &after[s + 1..],
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// Identifiers and the punctuation a path or use tree is made of.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some((j, d)) = chars.peek().copied() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(text[i..end].to_owned());
        } else if c == ':' && chars.peek().is_some_and(|(_, d)| *d == ':') {
            chars.next();
            out.push("::".into());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// A use tree's leaves: each path, and the name it binds.
fn use_paths(tree: &str) -> Vec<(ModPath, String)> {
    fn parse(toks: &[String], pos: &mut usize, prefix: &ModPath, out: &mut Vec<(ModPath, String)>) {
        let mut path = prefix.clone();
        while *pos < toks.len() {
            match toks[*pos].as_str() {
                "{" => {
                    *pos += 1;
                    while *pos < toks.len() && toks[*pos] != "}" {
                        parse(toks, pos, &path, out);
                        if *pos < toks.len() && toks[*pos] == "," {
                            *pos += 1;
                        }
                    }
                    *pos += 1;
                    return;
                }
                "," | "}" => break,
                "::" => *pos += 1,
                "*" => {
                    *pos += 1;
                    path.push("*".into());
                    out.push((path, "*".into()));
                    return;
                }
                "as" => {
                    let alias = toks.get(*pos + 1).cloned().unwrap_or_default();
                    *pos += 2;
                    if path.last().is_some_and(|l| l == "self") {
                        path.pop();
                    }
                    out.push((path, alias));
                    return;
                }
                word => {
                    path.push(word.to_owned());
                    *pos += 1;
                }
            }
        }
        if path.len() > prefix.len() {
            if path.last().is_some_and(|l| l == "self") {
                path.pop();
            }
            let name = path.last().cloned().unwrap_or_default();
            out.push((path, name));
        }
    }
    let toks = tokens(tree);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < toks.len() {
        let before = pos;
        parse(&toks, &mut pos, &Vec::new(), &mut out);
        if pos == before || (pos < toks.len() && toks[pos] == ",") {
            pos += 1;
        }
    }
    out
}

/// The `use` statements of a file's code: (tree, whether it is a `pub` re-export), and the code
/// with them taken out.
fn uses(code: &str) -> (Vec<(String, bool)>, String) {
    let mut found = Vec::new();
    let mut rest = String::new();
    let b = code.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while let Some(at) = code[i..].find("use ").map(|n| i + n) {
        let boundary = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        let Some(end) = code[at..].find(';').map(|n| at + n) else { break };
        if !boundary {
            i = at + 4;
            continue;
        }
        let head = code[..at].trim_end();
        let public = head.ends_with("pub")
            || (head.ends_with(')') && head.rfind("pub(").is_some_and(|p| head[p..].find(')') == Some(head.len() - 1 - p)));
        found.push((code[at + 4..end].to_owned(), public));
        rest.push_str(&code[copied..at]);
        copied = end + 1;
        i = end + 1;
    }
    rest.push_str(&code[copied..]);
    (found, rest)
}

/// Every `a::b::c` path in code (two segments or more), not counting the middle of a longer one.
fn inline_paths(code: &str) -> Vec<ModPath> {
    let toks = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    let word = |t: &str| t.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_');
    while i < toks.len() {
        if word(&toks[i]) && (i == 0 || toks[i - 1] != "::") && toks.get(i + 1).is_some_and(|t| t == "::") {
            let mut path = vec![toks[i].clone()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|t| t == "::") && toks.get(j + 1).is_some_and(|t| word(t)) {
                path.push(toks[j + 1].clone());
                j += 2;
            }
            if path.len() > 1 {
                out.push(path);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// A crate's files by module path, and the code of each.
struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    code: BTreeMap<ModPath, String>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let lib = src.join("lib.rs").exists();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|x| x != "rs") {
                    continue;
                }
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut parts: ModPath = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if parts.first().is_some_and(|p| p == "bin") {
                    continue;
                }
                match parts.as_slice() {
                    [root] if root == "lib" => parts.clear(),
                    [root] if root == "main" && !lib => parts.clear(),
                    // A binary beside a library is a crate of its own.
                    [root] if root == "main" => continue,
                    _ => {
                        if parts.last().is_some_and(|l| l == "mod") {
                            parts.pop();
                        }
                    }
                }
                files.insert(parts, path);
            }
        }
        let code = files.iter().map(|(m, p)| (m.clone(), code_of(&std::fs::read_to_string(p).unwrap()))).collect();
        Crate { files, code }
    }

    fn is_child(&self, module: &ModPath, name: &str) -> bool {
        let mut child = module.clone();
        child.push(name.to_owned());
        self.files.contains_key(&child)
    }

    /// A path as written in `module`, made absolute; `None` for one outside the crate.
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "self" => Some(module.iter().chain(&path[1..]).cloned().collect()),
            "super" => {
                let ups = path.iter().take_while(|p| *p == "super").count();
                let base = &module[..module.len().saturating_sub(ups)];
                Some(base.iter().chain(&path[ups..]).cloned().collect())
            }
            name if self.is_child(module, name) => Some(module.iter().chain(path).cloned().collect()),
            _ => None,
        }
    }

    fn defines(&self, module: &ModPath, name: &str) -> bool {
        let toks = tokens(&self.code[module]);
        toks.windows(2).any(|w| {
            matches!(w[0].as_str(), "struct" | "enum" | "fn" | "const" | "static" | "type" | "trait" | "union" | "mod") && w[1] == name
        }) || toks.windows(3).any(|w| w[0] == "macro_rules" && w[1] == "!" && w[2] == name)
    }

    /// The names `module` re-exports, with the paths they come from.
    fn reexports(&self, module: &ModPath) -> BTreeMap<String, ModPath> {
        let (found, _) = uses(&self.code[module]);
        found.into_iter().filter(|(_, public)| *public).flat_map(|(tree, _)| use_paths(&tree)).map(|(path, name)| (name, path)).collect()
    }

    /// The file that defines what `path` (as written in `module`) names.
    fn resolve(&self, module: &ModPath, path: &[String], depth: usize) -> Option<ModPath> {
        let mut rest = self.absolute(module, path)?;
        let mut target = ModPath::new();
        while let Some(first) = rest.first() {
            let mut next = target.clone();
            next.push(first.clone());
            if !self.files.contains_key(&next) {
                break;
            }
            target = next;
            rest.remove(0);
        }
        let Some(name) = rest.first().filter(|n| *n != "*") else { return Some(target) };
        if depth < 8 && !self.defines(&target, name) {
            if let Some(from) = self.reexports(&target).get(name) {
                let mut through = from.clone();
                through.extend(rest[1..].iter().cloned());
                if let Some(found) = self.resolve(&target, &through, depth + 1) {
                    return Some(found);
                }
            }
        }
        Some(target)
    }

    /// Each file's dependencies on the crate's other files.
    fn graph(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        self.code
            .iter()
            .map(|(module, code)| {
                let (found, body) = uses(code);
                let mut refs: Vec<ModPath> =
                    found.iter().filter(|(_, public)| !public).flat_map(|(tree, _)| use_paths(tree)).map(|(path, _)| path).collect();
                refs.extend(inline_paths(&body));
                let deps = refs.iter().filter_map(|path| self.resolve(module, path, 0)).filter(|t| t != module).collect();
                (module.clone(), deps)
            })
            .collect()
    }
}

/// The circles of a graph: each strongly connected set of two files or more, as names.
fn circles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<String>> {
    let nodes: Vec<&ModPath> = graph.keys().collect();
    let reach = |from: &ModPath| -> BTreeSet<ModPath> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<ModPath> = graph[from].iter().cloned().collect();
        while let Some(n) = stack.pop() {
            if seen.insert(n.clone()) {
                stack.extend(graph.get(&n).into_iter().flatten().cloned());
            }
        }
        seen
    };
    let reaches: BTreeMap<&ModPath, BTreeSet<ModPath>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if placed.contains(*n) || !reaches[n].contains(*n) {
            continue;
        }
        let set: Vec<&ModPath> = nodes.iter().copied().filter(|m| reaches[n].contains(*m) && reaches[m].contains(*n)).collect();
        placed.extend(set.iter().map(|m| (*m).clone()));
        out.push(set.iter().map(|m| if m.is_empty() { "lib".to_owned() } else { m.join("::") }).collect());
    }
    out
}

/// The circles of files in the crate at `src`, with each file's dependencies inside its circle.
fn circles_in(src: &Path, root_counts: bool) -> Vec<String> {
    let krate = Crate::read(src);
    let mut graph = krate.graph();
    if !root_counts {
        graph.remove(&ModPath::new());
        for deps in graph.values_mut() {
            deps.remove(&ModPath::new());
        }
    }
    circles(&graph).into_iter().map(|c| c.join(" ↔ ")).collect()
}

#[test]
fn the_module_graph_has_no_circle_of_files() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut read = 0;
    for krate in std::fs::read_dir(&crates).unwrap().filter_map(Result::ok) {
        let name = krate.file_name().to_string_lossy().into_owned();
        let src = krate.path().join("src");
        if !src.is_dir() {
            continue;
        }
        read += 1;
        for circle in circles_in(&src, LAYERED.contains(&name.as_str())) {
            found.push(format!("{name}: {circle}"));
        }
    }
    assert!(read > 10, "read too few crates: the walk is broken");
    assert!(found.is_empty(), "files that import each other in a circle:\n{}", found.join("\n"));
}

#[test]
fn the_circle_check_finds_a_circle_through_a_reexport_and_not_one_through_wiring() {
    let dir = std::env::temp_dir().join(format!("clankie-circle-check-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("state")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).unwrap();
    write("lib.rs", "mod state;\nmod rest;\npub use state::Config;\npub struct Loopback(state::State, state::Config);\n");
    write("state/mod.rs", "mod data;\npub use data::Config;\npub struct State;\n");
    write("state/data.rs", "// crate::rest::Upload in a comment is no dependence\npub struct Config;\n");
    write("rest.rs", "use crate::state::{Config, State};\npub type Upload = (String, Vec<u8>);\n");
    assert_eq!(circles_in(&src, true), Vec::<String>::new(), "wiring and comments are not dependence");
    write("state/data.rs", "use crate::rest::Upload;\npub struct Config(Vec<Upload>);\n");
    assert_eq!(circles_in(&src, true), vec!["rest ↔ state::data".to_owned()], "rest names Config, which data defines");
    write("state/data.rs", "pub struct Config(Vec<crate::Loopback>);\n");
    assert_eq!(circles_in(&src, true), vec!["lib ↔ state::data".to_owned()], "the root names Config, which names the root");
    assert_eq!(circles_in(&src, false), Vec::<String>::new(), "with the root left out");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The third rule of `layout.rs`: every crate's root in the graph too. A root wires its
/// modules; what they share lives in a module of their own, so no module imports its root.
#[test]
fn layout_no_module_imports_an_item_of_its_crate_root_that_imports_it_back() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap().filter_map(Result::ok) {
        let src = krate.path().join("src");
        if src.is_dir() {
            let name = krate.file_name().to_string_lossy().into_owned();
            found.extend(circles_in(&src, true).into_iter().map(|c| format!("{name}: {c}")));
        }
    }
    println!("layout: {} circle(s) through a crate root", found.len());
    assert!(found.is_empty(), "modules and their crate root importing each other:\n{}", found.join("\n"));
}
