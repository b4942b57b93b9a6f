//! The machine a result came from: CPU model, cores, kernel. Printed with every result.

/// What the lab records about the machine.
#[derive(serde::Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub thp: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Machine { cpu_model, cores: vmarena_platform::cpu::count(), kernel, thp }
    }

    pub fn line(&self) -> String {
        format!("machine: {} x {}, Linux {}, THP {}", self.cores, self.cpu_model, self.kernel, self.thp)
    }
}

/// Write a result file, creating its folder first (`results/` is not in a fresh clone).
pub fn write_output(path: &std::path::Path, body: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
}
