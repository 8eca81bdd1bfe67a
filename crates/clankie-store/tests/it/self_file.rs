//! The self as a file: the file wins only where it says so, and only when it changes.

use clankie_store::{MemoryStatus, OwnerSettings, Persona, SELF_FILE_SOURCE, SelfFile, SelfFileError, Sharing, Store};

const FILE: &str = r#"
[persona]
name = "Clankie"
aliases = ["clanky", " bolt "]
sheet = """
A retired welding robot who now keeps a guild's lights on.
"""
style = "dry, short sentences"

[settings]
owner = "111111111111111111"
operators = [222222222222222222, "333333333333333333"]
guilds = ["444444444444444444"]
sharing = "none"

[memory]
facts = ["Raids are on Fridays.", "Ada runs the book club."]
"#;

/// Versions and counts a second apply must leave as they are.
async fn marks(store: &Store) -> (i64, i64, usize, usize, usize) {
    (
        store.persona().await.unwrap().version,
        store.owner_settings().await.unwrap().version,
        store.self_versions("persona", 100).await.unwrap().len(),
        store.self_versions("settings", 100).await.unwrap().len(),
        store.memories(MemoryStatus::Approved, 1000).await.unwrap().len(),
    )
}

#[tokio::test]
async fn settings_a_self_file_applied_twice_changes_nothing_the_second_time() {
    let (store, _db) = super::store().await;
    let first = store.apply_self_file(&SelfFile::parse(FILE).unwrap()).await.unwrap();
    assert_eq!(
        first.written,
        [
            "persona.name",
            "persona.aliases",
            "persona.sheet",
            "persona.style",
            "settings.owner",
            "settings.operators",
            "settings.guilds",
            "settings.sharing"
        ]
    );
    assert_eq!(first.memories_added, 2);
    assert_eq!((first.persona_version, first.settings_version), (Some(1), Some(1)), "one version per table, as a console edit");
    assert_eq!(
        store.persona().await.unwrap(),
        Persona {
            name: "Clankie".into(),
            aliases: vec!["clanky".into(), "bolt".into()],
            character_sheet: "A retired welding robot who now keeps a guild's lights on.\n".into(),
            speaking_style: "dry, short sentences".into(),
            version: 1,
        }
    );
    assert_eq!(
        store.owner_settings().await.unwrap(),
        OwnerSettings {
            owner_id: Some(111111111111111111),
            operators: vec![222222222222222222, 333333333333333333],
            guilds: vec![444444444444444444],
            sharing: Sharing::None,
            version: 1,
            ..Default::default()
        }
    );
    let memory = store.memories(MemoryStatus::Approved, 10).await.unwrap();
    assert_eq!(memory.iter().map(|m| m.fact.as_str()).collect::<Vec<_>>(), ["Raids are on Fridays.", "Ada runs the book club."]);
    assert!(memory.iter().all(|m| m.proposed_in == SELF_FILE_SOURCE), "a fact says it came from the self file");
    let versions = store.self_versions("persona", 10).await.unwrap();
    assert_eq!(versions[0].body["name"], "Clankie", "the history row a console edit writes");

    let before = marks(&store).await;
    // Parsed afresh, as a restarted captain reads it.
    let second = store.apply_self_file(&SelfFile::parse(FILE).unwrap()).await.unwrap();
    assert!(second.is_empty(), "the second apply wrote {second}");
    assert_eq!(second.to_string(), "nothing changed");
    assert_eq!((second.persona_version, second.settings_version), (None, None));
    assert_eq!(marks(&store).await, before, "(persona version, settings version, persona rows, settings rows, memories)");
}

#[tokio::test]
async fn settings_a_console_edit_after_a_self_file_stands_until_the_file_changes_that_field() {
    let (store, _db) = super::store().await;
    let file = |name: &str| {
        SelfFile::parse(&format!(
            "[persona]\nname = \"{name}\"\nstyle = \"dry\"\n[settings]\noperators = [1, 2]\n[memory]\nfacts = [\"Raids are on Fridays.\"]\n"
        ))
        .unwrap()
    };
    store.apply_self_file(&file("Clankie")).await.unwrap();

    // The console replaces the whole persona and settings: a new name and style, other operators,
    // and the file's fact withdrawn.
    let p = store.persona().await.unwrap();
    store.set_persona(&Persona { name: "Clanky".into(), speaking_style: "warm".into(), ..p }).await.unwrap();
    let s = store.owner_settings().await.unwrap();
    store.set_owner_settings(&OwnerSettings { operators: vec![3], ..s }).await.unwrap();
    let fact = store.memories(MemoryStatus::Approved, 10).await.unwrap().remove(0);
    assert!(store.decide_memory(fact.id, MemoryStatus::Approved, MemoryStatus::Rejected).await.unwrap());
    let edited = store.persona().await.unwrap();

    // The same file again: every edit stands.
    let again = store.apply_self_file(&file("Clankie")).await.unwrap();
    assert!(again.is_empty(), "the unchanged file wrote {again}");
    assert_eq!(store.persona().await.unwrap(), edited);
    assert_eq!(store.owner_settings().await.unwrap().operators, [3]);
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().is_empty(), "a withdrawn fact came back");

    // The file changes the name: its new value wins there, and only there.
    let changed = store.apply_self_file(&file("Clankie II")).await.unwrap();
    assert_eq!(changed.written, ["persona.name"]);
    assert_eq!(changed.persona_version, Some(edited.version + 1));
    let p = store.persona().await.unwrap();
    assert_eq!(p.name, "Clankie II");
    assert_eq!(p.speaking_style, "warm", "the edit's style stands: the file did not change it");
    assert_eq!(store.owner_settings().await.unwrap().operators, [3], "the edit's operators stand");
    assert_eq!(store.self_versions("persona", 1).await.unwrap()[0].body["name"], "Clankie II");
}

/// The example with its commented-out keys (`#key = …`) taken in too.
fn every_key_of(example: &str) -> String {
    example
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase()) && rest.contains(" = ") => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn settings_the_example_self_file_parses() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/self.example.toml");
    let example = SelfFile::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(example.name.is_some() && example.sheet.is_some() && !example.facts.is_empty());
    let (store, _db) = super::store().await;
    let report = store.apply_self_file(&example).await.unwrap();
    assert!(!report.is_empty());

    // Every key it shows, commented out or not, is one a self file may hold.
    let all = SelfFile::parse(&every_key_of(&std::fs::read_to_string(&path).unwrap())).unwrap();
    let given = [
        all.name.is_some(),
        all.aliases.is_some(),
        all.sheet.is_some(),
        all.style.is_some(),
        all.owner.is_some(),
        all.operators.is_some(),
        all.grants.is_some(),
        all.guilds.is_some(),
        all.channels.is_some(),
        all.trusted_dms.is_some(),
        all.trusted_rooms.is_some(),
        all.sharing.is_some(),
        !all.facts.is_empty(),
    ];
    assert!(given.iter().all(|g| *g), "the example leaves a key out: {all:?}");
}

#[tokio::test]
async fn settings_a_self_file_with_an_unknown_key_is_refused_by_name() {
    let refusal = |text: &str| SelfFile::parse(text).expect_err(text).to_string();
    let typo = refusal("[persona]\nname = \"Clankie\"\nnmae = \"Clanky\"\n");
    assert!(typo.contains("`nmae`") && typo.contains("line 3"), "{typo}");
    assert!(!typo.contains("Clanky"), "the refusal quotes the file's words: {typo}");
    let table = refusal("[persnoa]\nname = \"Clankie\"\n");
    assert!(table.contains("`persnoa`"), "{table}");
    let setting = refusal("[settings]\noperator = [1]\n");
    assert!(setting.contains("`operator`") && setting.contains("`operators`"), "names the key and the ones it may be: {setting}");

    // The checks the CLI makes.
    assert!(matches!(SelfFile::parse("[settings]\nguilds = [\"12ab\"]\n"), Err(SelfFileError::NotAnId { field: "settings.guilds", .. })));
    assert!(matches!(SelfFile::parse("[settings]\nsharing = \"world\"\n"), Err(SelfFileError::Sharing(_))));
    let long = format!("[persona]\nname = \"{}\"\n", "x".repeat(81));
    assert!(matches!(SelfFile::parse(&long), Err(SelfFileError::TooLong { field: "persona.name", chars: 81, max: 80 })));
    let long = format!("[memory]\nfacts = [\"{}\"]\n", "x".repeat(301));
    assert!(matches!(SelfFile::parse(&long), Err(SelfFileError::TooLong { max: 300, .. })));
    assert!(matches!(SelfFile::parse("[memory]\nfacts = [\" \"]\n"), Err(SelfFileError::EmptyFact)));
    assert_eq!(SelfFile::parse("[settings]\nowner = \"none\"\n").unwrap().owner, Some(None));
}
