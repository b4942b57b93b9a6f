//! The driver's parameters: the command line of `vmarena test-vmalloc` ([`Args`]), the
//! script's modes ([`Mode`]) and the kernel module's parameters after defaults, mode and
//! overrides ([`Params`]), with the kernel's clamping.

use super::cases::CASES;
use super::peers::Peer;
use vmarena::Strategy;

/// The script's modes (`test_vmalloc.sh performance|stress|smoke`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `sequential_test_order=1 test_repeat_count=3`, one worker.
    Performance,
    /// `nr_threads=<CPUs> test_repeat_count=20`.
    Stress,
    /// `test_loop_count=10000 test_repeat_count=10`.
    Smoke,
}

/// Command-line arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Bit i selects case i (0 fix_size .. 12 vrealloc); the kernel's default is 7.
    #[arg(long)]
    pub run_test_mask: Option<u64>,
    /// Workers (0 means 1).
    #[arg(long)]
    pub nr_threads: Option<u64>,
    /// Timed repetitions of each case per worker.
    #[arg(long)]
    pub test_repeat_count: Option<u64>,
    /// Loop iterations inside one repetition.
    #[arg(long)]
    pub test_loop_count: Option<u64>,
    /// Pages for fix_size, vm_map_ram and no_block (0 means 1).
    #[arg(long)]
    pub nr_pages: Option<u64>,
    /// Run the cases in mask order instead of a per-worker shuffle (1 or 0).
    #[arg(long)]
    pub sequential_test_order: Option<u64>,
    /// vmarena's own: every worker runs the same case at the same time (one shared order, a
    /// barrier before each case), so a case's time includes only its own contention.
    #[arg(long)]
    pub lockstep: bool,
    /// Use vmalloc_huge in fix_size (1 or 0): huge mappings from 512 pages up (nr_pages),
    /// every page written; the peers have none and allocate plainly.
    #[arg(long)]
    pub use_huge: Option<u64>,
    /// Objects of pcpu_alloc_test.
    #[arg(long)]
    pub nr_pcpu_objects: Option<u64>,
    /// A preset of test_vmalloc.sh; explicit parameters override it.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// vmarena strategies to run, comma separated; each gets a space of its own.
    #[arg(long, value_delimiter = ',', default_value = "nodes")]
    pub strategy: Vec<Strategy>,
    /// Peers to run the same cases against, comma separated: glibc, jemalloc, mimalloc, mmap.
    #[arg(long, value_delimiter = ',')]
    pub peer: Vec<Peer>,
    /// Count each contender's syscalls in a second run under `strace -f -c` (slow).
    #[arg(long)]
    pub syscalls: bool,
    /// Run in this process instead of one child process per contender (no process figures).
    #[arg(long)]
    pub in_process: bool,
    /// Internal: run one contender (`vmarena-<strategy>` or a peer) and print its result line.
    #[arg(long, hide = true)]
    pub child: Option<String>,
    /// Size of each strategy's space.
    #[arg(long, default_value_t = 64 << 30)]
    pub space_bytes: u64,
    /// Measure lock hold times too (two clock reads per lock acquisition).
    #[arg(long)]
    pub lock_timing: bool,
    /// Print each vmarena strategy's statistics after its run (always in --json): pool, cache
    /// and tree hits, steals, moves, purges.
    #[arg(long)]
    pub stats: bool,
    /// Seed of the workers' random numbers (worker i uses seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write every parameter, the machine and every figure as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Run everything once per thread count in this list (overrides nr_threads), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<usize>,
    /// Write throughput (million loops per second) against thread count per contender as SVG.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Parameters as `modprobe` takes them: `run_test_mask=7 nr_threads=2 ...`.
    #[arg(value_name = "KEY=VALUE")]
    pub params: Vec<String>,
}

/// The driver's parameters after defaults, mode and overrides, with the kernel's clamping.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Params {
    pub run_test_mask: u64,
    pub nr_threads: usize,
    pub test_repeat_count: u64,
    pub test_loop_count: u64,
    pub nr_pages: usize,
    pub sequential_test_order: bool,
    pub use_huge: bool,
    pub nr_pcpu_objects: u64,
    /// Not a kernel parameter: workers run each case together (see `Args::lockstep`).
    pub lockstep: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            run_test_mask: 7,
            nr_threads: 1,
            test_repeat_count: 1,
            test_loop_count: 1_000_000,
            nr_pages: 1,
            sequential_test_order: false,
            use_huge: false,
            nr_pcpu_objects: 35_000,
            lockstep: false,
        }
    }
}

const KEYS: [&str; 8] = [
    "run_test_mask",
    "nr_threads",
    "test_repeat_count",
    "test_loop_count",
    "nr_pages",
    "sequential_test_order",
    "use_huge",
    "nr_pcpu_objects",
];

impl Params {
    /// Resolve defaults, then the mode's preset, then explicit values (flags, then `key=value`).
    pub fn resolve(a: &Args, cpus: usize) -> Result<Params, String> {
        let mut p = Params { lockstep: a.lockstep, ..Params::default() };
        match a.mode {
            Some(Mode::Performance) => {
                p.sequential_test_order = true;
                p.test_repeat_count = 3;
            }
            Some(Mode::Stress) => {
                p.nr_threads = cpus;
                p.test_repeat_count = 20;
            }
            Some(Mode::Smoke) => {
                p.test_loop_count = 10_000;
                p.test_repeat_count = 10;
            }
            None => {}
        }
        let flags = [
            ("run_test_mask", a.run_test_mask),
            ("nr_threads", a.nr_threads),
            ("test_repeat_count", a.test_repeat_count),
            ("test_loop_count", a.test_loop_count),
            ("nr_pages", a.nr_pages),
            ("sequential_test_order", a.sequential_test_order),
            ("use_huge", a.use_huge),
            ("nr_pcpu_objects", a.nr_pcpu_objects),
        ];
        for (k, v) in flags {
            if let Some(v) = v {
                p.set(k, v)?;
            }
        }
        for word in &a.params {
            let (k, v) = word.split_once('=').ok_or_else(|| format!("'{word}' is not key=value"))?;
            if !KEYS.contains(&k) {
                return Err(format!("unknown parameter '{k}' (known: {})", KEYS.join(", ")));
            }
            let v: u64 = v.trim().parse().map_err(|_| format!("{k}: '{v}' is not a number"))?;
            p.set(k, v)?;
        }
        if p.run_test_mask == 0 || p.run_test_mask >> CASES.len() != 0 {
            return Err(format!(
                "run_test_mask {:#x} selects no case or a case beyond bit 12",
                p.run_test_mask
            ));
        }
        Ok(p)
    }

    fn set(&mut self, key: &str, v: u64) -> Result<(), String> {
        match key {
            "run_test_mask" => self.run_test_mask = v,
            // The kernel clamps nr_threads to [1, USHRT_MAX] and the counts to at least 1.
            "nr_threads" => self.nr_threads = v.clamp(1, u16::MAX as u64) as usize,
            "test_repeat_count" => self.test_repeat_count = v.max(1),
            "test_loop_count" => self.test_loop_count = v.max(1),
            "nr_pages" => self.nr_pages = v.max(1) as usize,
            "sequential_test_order" => self.sequential_test_order = v != 0,
            "use_huge" => self.use_huge = v != 0,
            "nr_pcpu_objects" => self.nr_pcpu_objects = v,
            _ => return Err(format!("unknown parameter '{key}'")),
        }
        Ok(())
    }

    /// The parameters as `key=value` words (how the parent hands them to a child).
    pub fn words(&self) -> Vec<String> {
        vec![
            format!("run_test_mask={}", self.run_test_mask),
            format!("nr_threads={}", self.nr_threads),
            format!("test_repeat_count={}", self.test_repeat_count),
            format!("test_loop_count={}", self.test_loop_count),
            format!("nr_pages={}", self.nr_pages),
            format!("sequential_test_order={}", self.sequential_test_order as u8),
            format!("use_huge={}", self.use_huge as u8),
            format!("nr_pcpu_objects={}", self.nr_pcpu_objects),
        ]
    }

    /// Indexes of the masked cases, in order.
    pub fn cases(&self) -> Vec<usize> {
        (0..CASES.len()).filter(|i| self.run_test_mask & (1 << i) != 0).collect()
    }
}
