//! A private network of Linux network namespaces for partition tests (issue 16): one namespace
//! per node, each with a veth into a bridge in the root namespace, addresses in a /24 of
//! 10.0.0.0/8 that no interface or route of the machine uses yet. The test's clients stay in the
//! root namespace and reach every node through the bridge.
//!
//! Links are cut with routes, no firewall needed (`iptables`/`nft` are not on the machine and
//! `tc netem` is not available): [`NetLab::cut`] adds `blackhole <peer>/32` in *both* namespaces,
//! so packets between the two are dropped silently both ways — TCP sees a partition, not a reset.
//! [`NetLab::set_link`] takes a node's veth down (cut from everything, clients included).
//!
//! Names carry a random token, so concurrent runs do not collide; [`Drop`] deletes the
//! namespaces (and with them the veths) and the bridge, also while a failed test unwinds.
//! Processes started in a namespace ([`NetLab::exec_prefix`]) must be stopped before the lab is
//! dropped — declare the lab before them.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and `ip` (iproute2): [`NetLab::unavailable`] says
//! why not, for a test to skip locally and fail in CI.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::process::Command;

use crate::error::{HarnessError, Result};

/// One node of a [`NetLab`]: its namespace and address.
#[derive(Clone, Debug)]
pub struct LabNode {
    /// The label the test gave it (e.g. `c1`, `b4`).
    pub label: String,
    /// The network namespace's name (`ip netns` name).
    pub netns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    /// The root-namespace end of its veth.
    host_veth: String,
}

/// Namespaces joined by a bridge, with link control; removed on drop. See the module doc.
#[derive(Debug)]
pub struct NetLab {
    token: String,
    bridge: String,
    /// The root namespace's address on the bridge (where clients connect from).
    host_ip: Ipv4Addr,
    nodes: Vec<LabNode>,
    /// Pairs of node indexes (lower first) whose link is cut.
    cut: BTreeSet<(usize, usize)>,
}

fn run_ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| HarnessError::io(format!("running ip {}", args.join(" ")), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Invalid(format!(
            "ip {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn ip_output(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| HarnessError::io(format!("running ip {}", args.join(" ")), e))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl NetLab {
    /// Why a lab cannot be built here (not root, no `ip`, namespaces refused), or `None`.
    pub fn unavailable() -> Option<String> {
        if !rustix::process::geteuid().is_root() {
            return Some("network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)".into());
        }
        if Command::new("ip").arg("-V").output().is_err() {
            return Some("`ip` (iproute2) is not installed".into());
        }
        let probe = format!("krprobe{}", rand::random::<u32>());
        match run_ip(&["netns", "add", &probe]) {
            Ok(()) => {
                let _ = run_ip(&["netns", "del", &probe]);
                None
            }
            Err(e) => Some(format!("`ip netns add` does not work here: {e}")),
        }
    }

    /// Creates one namespace per label, a bridge, and the veths between them; every link up.
    ///
    /// # Errors
    /// `Invalid` if an `ip` command fails (what was made so far is removed), `Io` if `ip`
    /// cannot run.
    pub fn create(labels: &[&str]) -> Result<NetLab> {
        if labels.is_empty() || labels.len() > 200 {
            return Err(HarnessError::Invalid(format!(
                "a lab has 1 to 200 nodes, not {}",
                labels.len()
            )));
        }
        let token = format!("{:05x}", rand::random::<u32>() & 0xf_ffff);
        let subnet = free_subnet()?;
        let mut lab = NetLab {
            bridge: format!("krb{token}"),
            host_ip: Ipv4Addr::new(10, subnet.0, subnet.1, 1),
            token,
            nodes: Vec::new(),
            cut: BTreeSet::new(),
        };
        // From here on, Drop removes whatever exists.
        run_ip(&["link", "add", &lab.bridge, "type", "bridge"])?;
        let host_cidr = format!("{}/24", lab.host_ip);
        run_ip(&["addr", "add", &host_cidr, "dev", &lab.bridge])?;
        run_ip(&["link", "set", &lab.bridge, "up"])?;
        for (i, label) in labels.iter().enumerate() {
            let host_octet = u8::try_from(i + 10).unwrap_or(u8::MAX); // at most 200 nodes, above
            let node = LabNode {
                label: (*label).to_owned(),
                netns: format!("krust-{}-{label}", lab.token),
                ip: Ipv4Addr::new(10, subnet.0, subnet.1, host_octet),
                host_veth: format!("krv{}h{i}", lab.token),
            };
            let inner = format!("krv{}n{i}", lab.token);
            run_ip(&["netns", "add", &node.netns])?;
            lab.nodes.push(node.clone());
            run_ip(&[
                "link",
                "add",
                &node.host_veth,
                "type",
                "veth",
                "peer",
                "name",
                &inner,
                "netns",
                &node.netns,
            ])?;
            run_ip(&["link", "set", &node.host_veth, "master", &lab.bridge])?;
            run_ip(&["link", "set", &node.host_veth, "up"])?;
            let cidr = format!("{}/24", node.ip);
            run_ip(&["-n", &node.netns, "addr", "add", &cidr, "dev", &inner])?;
            run_ip(&["-n", &node.netns, "link", "set", &inner, "up"])?;
            run_ip(&["-n", &node.netns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    fn index(&self, label: &str) -> Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.label == label)
            .ok_or_else(|| HarnessError::Invalid(format!("no node {label:?} in the lab")))
    }

    /// The node labelled `label`.
    ///
    /// # Panics
    /// If there is none (a bug in the test).
    pub fn node(&self, label: &str) -> &LabNode {
        let i = self.index(label).unwrap_or_else(|e| panic!("{e}"));
        &self.nodes[i]
    }

    /// The address of node `label`.
    ///
    /// # Panics
    /// As [`NetLab::node`].
    pub fn ip(&self, label: &str) -> Ipv4Addr {
        self.node(label).ip
    }

    /// The root namespace's address on the bridge.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The program and leading arguments that run a command inside node `label`'s namespace:
    /// `<path of ip> netns exec <netns>`, to be followed by the command. `ip` execs the command, so the
    /// process id seen by the test is the command's own (signals reach it directly).
    ///
    /// # Panics
    /// As [`NetLab::node`].
    pub fn exec_prefix(&self, label: &str) -> (OsString, Vec<OsString>) {
        let node = self.node(label);
        (
            ip_program().into_os_string(),
            vec!["netns".into(), "exec".into(), node.netns.clone().into()],
        )
    }

    /// Cuts the link between `a` and `b` both ways (a blackhole route to the other in each
    /// namespace). Cutting a cut link does nothing.
    ///
    /// # Errors
    /// `Invalid` for an unknown label or a failed `ip route add`.
    pub fn cut(&mut self, a: &str, b: &str) -> Result<()> {
        let (i, j) = self.pair(a, b)?;
        if !self.cut.insert((i, j)) {
            return Ok(());
        }
        self.blackholes(i, j, "add")
    }

    /// Restores the link between `a` and `b`. Healing a link that is not cut does nothing.
    ///
    /// # Errors
    /// As [`NetLab::cut`].
    pub fn heal(&mut self, a: &str, b: &str) -> Result<()> {
        let (i, j) = self.pair(a, b)?;
        if !self.cut.remove(&(i, j)) {
            return Ok(());
        }
        self.blackholes(i, j, "del")
    }

    /// `ip route <op> blackhole` to the other node in each of the namespaces of `i` and `j`.
    fn blackholes(&self, i: usize, j: usize, op: &str) -> Result<()> {
        for (from, to) in [(i, j), (j, i)] {
            let dst = format!("{}/32", self.nodes[to].ip);
            run_ip(&[
                "-n",
                &self.nodes[from].netns,
                "route",
                op,
                "blackhole",
                &dst,
            ])?;
        }
        Ok(())
    }

    /// Cuts `node` from each of `others` (its link to the clients in the root namespace stays).
    ///
    /// # Errors
    /// As [`NetLab::cut`].
    pub fn isolate(&mut self, node: &str, others: &[&str]) -> Result<()> {
        for other in others {
            self.cut(node, other)?;
        }
        Ok(())
    }

    /// Restores every cut link.
    ///
    /// # Errors
    /// As [`NetLab::heal`].
    pub fn heal_all(&mut self) -> Result<()> {
        let cut: Vec<(usize, usize)> = self.cut.iter().copied().collect();
        for (i, j) in cut {
            let (a, b) = (self.nodes[i].label.clone(), self.nodes[j].label.clone());
            self.heal(&a, &b)?;
        }
        Ok(())
    }

    /// Takes node `label`'s link to the bridge down (`up = false`: cut from every node and the
    /// clients) or up again.
    ///
    /// # Errors
    /// `Invalid` for an unknown label or a failed `ip link set`.
    pub fn set_link(&mut self, label: &str, up: bool) -> Result<()> {
        let i = self.index(label)?;
        let state = if up { "up" } else { "down" };
        run_ip(&["link", "set", &self.nodes[i].host_veth, state])
    }

    /// The labels of the links cut now, e.g. `["b4-c1"]`.
    pub fn cut_links(&self) -> Vec<String> {
        self.cut
            .iter()
            .map(|&(i, j)| format!("{}-{}", self.nodes[i].label, self.nodes[j].label))
            .collect()
    }

    fn pair(&self, a: &str, b: &str) -> Result<(usize, usize)> {
        let (i, j) = (self.index(a)?, self.index(b)?);
        if i == j {
            return Err(HarnessError::Invalid(format!("cannot cut {a} from itself")));
        }
        Ok((i.min(j), i.max(j)))
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and with it the host end.
        for node in &self.nodes {
            if let Err(e) = run_ip(&["netns", "del", &node.netns]) {
                eprintln!(
                    "krust-testkit: removing network namespace {}: {e}",
                    node.netns
                );
            }
        }
        if let Err(e) = run_ip(&["link", "del", &self.bridge]) {
            eprintln!("krust-testkit: removing bridge {}: {e}", self.bridge);
        }
    }
}

/// `ip`'s absolute path (a process spec wants a file), found on `PATH`; plain `ip` if it is not.
fn ip_program() -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("ip"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| "ip".into())
}

/// A `10.a.b.0/24` that no address or route of the root namespace overlaps.
fn free_subnet() -> Result<(u8, u8)> {
    let used = format!(
        "{}\n{}",
        ip_output(&["-4", "-o", "addr", "show"])?,
        ip_output(&["-4", "route", "show", "table", "all"])?
    );
    for _ in 0..100 {
        let a = 100 + rand::random::<u8>() % 100;
        let b = rand::random::<u8>();
        let prefix = format!("10.{a}.{b}.");
        // A coarse test (it also refuses a subnet inside a wider route of 10/8), which is fine:
        // there are many to pick from.
        let wide = used.lines().any(|l| {
            l.split_whitespace().any(|w| {
                w.starts_with(&prefix)
                    || w.starts_with("10.0.0.0/8")
                    || w.starts_with(&format!("10.{a}.0.0/16"))
            })
        });
        if !wide {
            return Ok((a, b));
        }
    }
    Err(HarnessError::Invalid(
        "no free 10.x.y.0/24 found for a network lab".into(),
    ))
}
