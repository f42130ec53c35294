//! docs/ARCHITECTURE.md stays true to the code: every crate and every stage is in it.

#[test]
fn architecture_names_every_crate_and_stage_in_order() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "crate {name} is not described"
        );
    }
    let mut at = 0;
    for (i, stage) in ramjet_pipeline::stage::STAGES.iter().enumerate() {
        let row = format!("| {i} | {} |", stage.name);
        let found = doc[at..]
            .find(&row)
            .unwrap_or_else(|| panic!("stage row `{row}` missing or out of order"));
        let line_end = doc[at + found..].find('\n').unwrap() + at + found;
        assert!(
            doc[at + found..line_end]
                .trim_end()
                .ends_with(&format!("| {} |", stage.may_end_with)),
            "stage {} statuses differ from the table",
            stage.name
        );
        at = line_end;
    }
}

/// The keys a table accepts, from the configuration's own "unknown key" error.
fn accepted(table_src: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let src = format!("{table_src}\nzz_probe = 1\n");
    let err = ramjet_config::load_str(&src, "probe.toml", dir.path())
        .expect_err("a probe key is refused")
        .to_string();
    let known = err
        .split("(known here: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no key list in: {err}"));
    known
        .trim_end_matches(')')
        .split(", ")
        .map(str::to_string)
        .collect()
}

/// The keys a section of docs/CONFIG.md documents (first column of its table).
fn documented(doc: &str, heading: &str) -> Vec<String> {
    let start = doc
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let body = &doc[start + 4..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn config_reference_documents_exactly_the_accepted_keys() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/CONFIG.md")).unwrap();
    let tables = [
        "limits",
        "timeouts",
        "log",
        "file_cache",
        "defaults",
        "location",
        "vhost",
        "upstream",
        "acme",
        "cache",
        "ftp",
    ];
    let cases = [
        ("Top level", ""),
        ("`[limits]`", "[limits]"),
        ("`[timeouts]`", "[timeouts]"),
        ("`[log]`", "[log]"),
        ("`[file_cache]`", "[file_cache]"),
        ("`[[location]]`", "[[location]]"),
        ("`[[vhost]]`", "[[vhost]]\nnames = [\"a\"]"),
        (
            "`[upstream.NAME]`",
            "[upstream.a]\nservers = [\"127.0.0.1:1\"]",
        ),
        ("`[acme]`", "[acme]\nstate_dir = \"s\""),
        ("`[cache.NAME]`", "[cache.a]"),
        ("`[ftp]`", "[ftp]"),
    ];
    for (heading, src) in cases {
        let mut want = accepted(src);
        if src.is_empty() {
            want.retain(|k| !tables.contains(&k.as_str()));
        }
        let mut have = documented(&doc, heading);
        want.sort();
        have.sort();
        assert_eq!(
            have, want,
            "docs/CONFIG.md section {heading} and the configuration types differ"
        );
    }
}

/// Every `.rs` file of the workspace's crates, concatenated (for name look-ups).
fn all_sources(root: &std::path::Path) -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("target") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                out.push('\n');
            }
        }
    }
    let mut s = String::new();
    walk(&root.join("crates"), &mut s);
    s
}

/// `word` stands in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// docs/ARCHITECTURE.md stands on its own and names only what exists: no reference
/// outside the repository; every backticked path is a file or folder of the repository;
/// every backticked Rust name (`a::b`, `Type`, `Type::method`, `fn_name`, `file.rs`
/// `name`) is a name in the source; each crate's "depends on" column lists exactly its
/// workspace dependencies.
#[test]
fn architecture_names_only_what_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    assert!(
        !doc.contains("../"),
        "the architecture sends readers outside the repository"
    );
    let src = all_sources(&root);
    let crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut missing = Vec::new();
    for (i, piece) in doc.split('`').enumerate() {
        if i % 2 == 0 || piece.is_empty() || piece.contains(' ') {
            continue;
        }
        // A path: a file or folder of the repository (from its root, a crate, or a
        // crate's src/).
        let pathish = piece.contains('/')
            && !piece.starts_with('/')
            && !piece.contains("://")
            && (piece.ends_with('/') || piece.rsplit('/').next().is_some_and(|f| f.contains('.')));
        if pathish {
            let p = piece.split("::").next().unwrap();
            let found = root.join(p).exists()
                || root.join("crates").join(p).exists()
                || crates.iter().any(|c| {
                    let c = root.join("crates").join(c);
                    ["", "src", "tests"]
                        .iter()
                        .any(|d| c.join(d).join(p).exists())
                });
            if !found {
                missing.push(format!("path {piece}"));
            }
            continue;
        }
        // A Rust path or a CamelCase type name: each segment must be a name in the source.
        let rusty = piece.contains("::")
            || (piece.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && piece.chars().any(|c| c.is_ascii_lowercase())
                && piece.chars().all(|c| c.is_ascii_alphanumeric()));
        if rusty {
            let name = piece.trim_end_matches("()");
            for seg in name.split("::").filter(|s| !s.is_empty()) {
                let seg = seg.split('(').next().unwrap();
                if crates
                    .iter()
                    .any(|c| c == seg || c.replace('-', "_") == seg)
                {
                    continue;
                }
                if !has_word(&src, seg) {
                    missing.push(format!("name {piece} ({seg})"));
                }
            }
        }
    }
    // The crates table's dependency column.
    for c in &crates {
        let row_start = format!("| `{c}` |");
        let Some(at) = doc.find(&row_start) else {
            continue;
        };
        let row = &doc[at..at + doc[at..].find('\n').unwrap()];
        let cols: Vec<&str> = row.split(" | ").collect();
        let listed = cols
            .last()
            .unwrap()
            .trim_end_matches(" |")
            .trim_end_matches('|');
        if listed.contains("all of the above") {
            continue;
        }
        let manifest =
            std::fs::read_to_string(root.join("crates").join(c).join("Cargo.toml")).unwrap();
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .map(|d| d.split("\n[").next().unwrap())
            .unwrap_or("");
        let mut want: Vec<String> = deps
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
            .filter_map(|k| k.split('.').next())
            .filter_map(|k| k.strip_prefix("ramjet-"))
            .map(str::to_string)
            .collect();
        want.sort();
        want.dedup();
        let mut have: Vec<String> = listed
            .split([',', ' ', '(', ')'])
            .map(|w| w.trim())
            .filter(|w| crates.iter().any(|c| c == w))
            .map(str::to_string)
            .collect();
        have.sort();
        have.dedup();
        if have != want {
            missing.push(format!(
                "crate {c}: depends on {want:?}, the table says {have:?}"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md:\n{}",
        missing.join("\n")
    );
}
