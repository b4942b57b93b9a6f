//! The machine a result came from: CPU model, cores, kernel. Printed with every result.

use std::fmt::Write;

/// What the lab records about the machine.
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

    pub fn json(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"cpu_model\":{},\"cores\":{},\"kernel\":{},\"thp\":{}}}",
            json_str(&self.cpu_model),
            self.cores,
            json_str(&self.kernel),
            json_str(&self.thp)
        );
        s
    }
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
