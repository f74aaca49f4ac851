//! Change detection on a big git work tree against `git status --porcelain`, in one run
//! (driven by `bench/change_detection.sh`).
//!
//! The tree: FILES small files in 1000 folders, committed, plus an ignored folder.
//! Before measuring, an "agent" edits, adds, deletes and renames a few files. Each
//! round times, alternating so machine noise hits all alike:
//! - `git status --porcelain` (the raw baseline: one look at what differs),
//! - git mode, what a run does for a repository: the baseline before the agent
//!   (`GitBaseline::take`) and the collect step after it (`GitBaseline::changes`),
//! - snapshot mode, what a run does for any other workspace (`.git` is skipped): the
//!   snapshot before the agent (`Snapshot::take`, every file hashed) and the collect
//!   step after it (`Snapshot::take_after`, which hashes again only files whose stat
//!   changed, then `Snapshot::changes`).
//!
//! It prints the medians and the ratios against `git status`, then one
//! `RESULT <row> <ours> <git status> ms <ratio>` line per step for `bench/run`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentgate::changeset::GitBaseline;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let files: usize = std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let folder = root.join(format!("d{:03}", i % 1000));
        if i < 1000 {
            std::fs::create_dir(&folder).unwrap();
        }
        std::fs::write(folder.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
    std::fs::create_dir(root.join("ignored")).unwrap();
    for i in 0..100 {
        std::fs::write(root.join(format!("ignored/o{i}")), "x").unwrap();
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "tree"]);
    // Refresh the index's stat cache, as any checkout leaves it.
    git(root, &["status", "--porcelain"]);

    let workspace = cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()).unwrap();
    let redactor = agentgate::record::Redactor::default();
    let baseline = GitBaseline::take(&workspace)
        .unwrap()
        .expect("a repository");
    let before = agentgate::changeset::Snapshot::take(&workspace).unwrap();
    // The agent's work.
    std::fs::write(root.join("d001/f1.txt"), "edited\n").unwrap();
    std::fs::write(root.join("d002/new.txt"), "new\n").unwrap();
    std::fs::remove_file(root.join("d003/f3.txt")).unwrap();
    std::fs::rename(root.join("d004/f4.txt"), root.join("d004/moved.txt")).unwrap();
    std::fs::write(root.join("ignored/o1"), "changed").unwrap();
    let found = baseline.changes(&workspace, &redactor).unwrap();
    assert_eq!(found.files.len(), 4, "{:?}", found.files);
    assert_eq!(found.ignored.len(), 1);

    let after = agentgate::changeset::Snapshot::take_after(&workspace, &before).unwrap();
    // The edit, the new file, the deletion, the rename's two sides and the ignored file.
    assert_eq!(
        before.changes(&after).len(),
        6,
        "{:?}",
        before.changes(&after)
    );

    let (mut status, mut collect, mut take, mut snapshot, mut snapshot_collect) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let t = Instant::now();
        let out = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(root)
            .output()
            .unwrap();
        status.push(t.elapsed());
        assert!(out.status.success());

        let t = Instant::now();
        let changes = baseline.changes(&workspace, &redactor).unwrap();
        collect.push(t.elapsed());
        assert_eq!(changes.files.len(), 4);

        let t = Instant::now();
        GitBaseline::take(&workspace).unwrap().unwrap();
        take.push(t.elapsed());

        let t = Instant::now();
        agentgate::changeset::Snapshot::take(&workspace).unwrap();
        snapshot.push(t.elapsed());

        let t = Instant::now();
        let after = agentgate::changeset::Snapshot::take_after(&workspace, &before).unwrap();
        let changes = before.changes(&after);
        snapshot_collect.push(t.elapsed());
        assert_eq!(changes.len(), 6);
    }
    let (status, collect, take, snapshot, snapshot_collect) = (
        median(status),
        median(collect),
        median(take),
        median(snapshot),
        median(snapshot_collect),
    );
    let ratio = |d: Duration| d.as_secs_f64() / status.as_secs_f64();
    println!("change detection on {files} files, {rounds} rounds, medians:");
    println!(
        "  git status --porcelain        {:>8.1} ms   (baseline)",
        status.as_secs_f64() * 1e3
    );
    println!(
        "  ours, collect after the agent {:>8.1} ms   ratio {:.2}x",
        collect.as_secs_f64() * 1e3,
        ratio(collect)
    );
    println!(
        "  ours, baseline before it      {:>8.1} ms   ratio {:.2}x",
        take.as_secs_f64() * 1e3,
        ratio(take)
    );
    println!(
        "  snapshot before the agent     {:>8.1} ms   ratio {:.2}x",
        snapshot.as_secs_f64() * 1e3,
        ratio(snapshot)
    );
    println!(
        "  snapshot, collect after it    {:>8.1} ms   ratio {:.2}x",
        snapshot_collect.as_secs_f64() * 1e3,
        ratio(snapshot_collect)
    );
    let size = match files {
        n if n % 1000 == 0 => format!("{}k", n / 1000),
        n => n.to_string(),
    };
    for (row, took) in [
        ("git-collect", collect),
        ("git-baseline", take),
        ("snapshot-collect", snapshot_collect),
        ("snapshot-baseline", snapshot),
    ] {
        println!(
            "RESULT changes-{size}-{row} {:.1} {:.1} ms x{:.2}",
            took.as_secs_f64() * 1e3,
            status.as_secs_f64() * 1e3,
            ratio(took)
        );
    }
}
