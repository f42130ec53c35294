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
