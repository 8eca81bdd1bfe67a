//! A captain applies `CLANKIE_SELF_FILE` at start, and refuses to start on a bad one.

use std::time::Duration;

use clankie_store::MemoryStatus;

use super::{DumpLogsOnPanic, Rig, spawn_captain_with, until};

fn log_of(rig: &Rig, replica: &str) -> String {
    std::fs::read_to_string(rig.dir.path().join(format!("{replica}.log"))).unwrap_or_default()
}

#[tokio::test]
async fn settings_a_captain_applies_its_self_file_at_start() {
    let rig = Rig::new().await;
    let _logs = DumpLogsOnPanic(rig.dir.path().to_owned());
    let file = rig.dir.path().join("self.toml");
    std::fs::write(
        &file,
        "[persona]\nname = \"Clankie\"\nsheet = \"A retired welding robot.\"\n[settings]\noperators = [7]\n\
         [memory]\nfacts = [\"Raids are on Fridays.\"]\n",
    )
    .unwrap();
    let self_file = file.display().to_string();

    let mut a = spawn_captain_with(&rig, "captain-a", &[("CLANKIE_SELF_FILE", &self_file)]);
    until("the self file applied and ingress consumed", Duration::from_secs(30), || {
        let log = log_of(&rig, "captain-a");
        log.contains("self file applied") && log.contains("captain consuming ingress")
    })
    .await;
    let log = log_of(&rig, "captain-a");
    assert!(log.find("self file applied") < log.find("captain consuming ingress"), "applied after lanes could start: {log}");
    assert!(log.contains("persona.name, persona.sheet, settings.operators, 1 approved memory"), "{log}");
    assert!(!log.contains("welding") && !log.contains("Raids"), "the log holds the file's words: {log}");
    let persona = rig.store.persona().await.unwrap();
    assert_eq!((persona.name.as_str(), persona.character_sheet.as_str()), ("Clankie", "A retired welding robot."));
    assert_eq!(rig.store.owner_settings().await.unwrap().operators, [7]);
    let memory = rig.store.memories(MemoryStatus::Approved, 10).await.unwrap();
    assert_eq!(memory.iter().map(|m| m.fact.as_str()).collect::<Vec<_>>(), ["Raids are on Fridays."]);
    a.kill().await.unwrap();

    // Started again with the same file: nothing is written.
    let mut b = spawn_captain_with(&rig, "captain-b", &[("CLANKIE_SELF_FILE", &self_file)]);
    until("the self file applied again", Duration::from_secs(30), || log_of(&rig, "captain-b").contains("self file applied")).await;
    assert!(log_of(&rig, "captain-b").contains("nothing changed"), "{}", log_of(&rig, "captain-b"));
    assert_eq!(rig.store.persona().await.unwrap().version, persona.version);
    b.kill().await.unwrap();

    // A file with a key no self file holds stops the captain, saying which file and which key.
    let bad = rig.dir.path().join("bad-self.toml");
    std::fs::write(&bad, "[persona]\nnmae = \"Clanky\"\n").unwrap();
    let mut c = spawn_captain_with(&rig, "captain-b", &[("CLANKIE_SELF_FILE", &bad.display().to_string())]);
    let status =
        tokio::time::timeout(Duration::from_secs(30), c.wait()).await.expect("the captain kept running on a bad self file").unwrap();
    assert!(!status.success());
    let log = log_of(&rig, "captain-b");
    assert!(log.contains(&bad.display().to_string()) && log.contains("CLANKIE_SELF_FILE") && log.contains("`nmae`"), "{log}");
    assert_eq!(rig.store.persona().await.unwrap().name, "Clankie");
}
