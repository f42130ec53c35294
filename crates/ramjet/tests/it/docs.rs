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
