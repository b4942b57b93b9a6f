//! Options from the environment (tier 1): stable options are read always; an experiment's
//! variable only with `VMARENA_EXPERIMENTS=1`. One test in this binary, as it changes the
//! process's environment.

use vmarena_engine::ArenaOptions;

#[test]
fn experiments_are_read_only_when_asked_for() {
    // This binary runs this one test, so nothing else reads the environment meanwhile.
    std::env::set_var("VMARENA_NODES", "3");
    std::env::set_var("VMARENA_PAGE_MOVES", "0");
    std::env::remove_var("VMARENA_EXPERIMENTS");
    let o = ArenaOptions::default().with_env().unwrap();
    assert_eq!(o.nodes, 3, "a stable option is read");
    assert!(o.page_moves, "an experiment's variable is ignored without VMARENA_EXPERIMENTS=1");
    std::env::set_var("VMARENA_EXPERIMENTS", "1");
    let o = ArenaOptions::default().with_env().unwrap();
    assert!(!o.page_moves, "and read with it");
    let experiments: Vec<&str> =
        ArenaOptions::TABLE.iter().filter(|d| d.experiment).map(|d| d.name).collect();
    assert!(experiments.contains(&"page_moves") && !experiments.contains(&"nodes"), "{experiments:?}");
}
