//! `krust metadata-shell`: Kafka 3.9's `kafka-metadata-shell.sh` (`org.apache.kafka.shell`) over
//! a metadata snapshot file (`--snapshot`) or a metadata log directory (`--directory`)
//! (facts §7.3).
//!
//! With a command on the command line it runs that one command (`ls`, `cat`, `find`, `tree`, as
//! Kafka's non-interactive shell allows) and exits; otherwise it reads commands from stdin
//! behind a `>> ` prompt (`cd`, `pwd`, `help`, `history`, `man` and `exit` too). Output is
//! Kafka's, line for line: the tree ([`tree`]) has Kafka's image-node layout and leaf texts,
//! paths take Kafka 3.9's globs ([`glob`]), `ls` prints one entry per line (Kafka's column
//! layout applies only to a terminal of known width). Lines are read plainly: no line editing
//! or completion.
//!
//! # Layout
//!
//! - `load.rs`: the image from a file or a directory.
//! - [`tree`]: the node tree and Kafka's leaf texts.
//! - [`glob`]: glob path components.

pub mod glob;
mod load;
pub mod tree;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use glob::GlobComponent;
use tree::Node;

/// Where the image comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--snapshot <file>`: a `.checkpoint` (or a `.log` segment), read as a log.
    Snapshot(PathBuf),
    /// `--directory <dir>`: `__cluster_metadata-0`, latest snapshot plus the log after it.
    Directory(PathBuf),
}

/// The commands of the non-interactive shell, in Kafka's order.
const NON_INTERACTIVE: &[&str] = &["cat", "find", "ls", "tree"];
/// The commands of the interactive shell.
const INTERACTIVE: &[&str] = &[
    "cat", "cd", "exit", "find", "help", "history", "ls", "man", "pwd", "tree",
];

const HELP: &str = "Welcome to the Apache Kafka metadata shell.

usage:  {cat,cd,exit,find,help,history,ls,man,pwd,tree} ...

positional arguments:
  {cat,cd,exit,find,help,history,ls,man,pwd,tree}
    cat                  Show the contents of metadata files.
    cd                   Set the current working directory.
    exit                 Exit the metadata shell.
    find                 Search for nodes in the directory hierarchy.
    help                 Display this help message.
    history              Print command history.
    ls                   List metadata nodes.
    man                  Show the help text for a specific command.
    pwd                  Print the current working directory.
    tree                 Show the contents  of  metadata  nodes  in  a tree
                         structure.
";

/// A `man` page: command, description, usage, positional argument and its help.
type ManPage = (
    &'static str,
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
);

/// The `man` pages, one per interactive command.
const MAN: &[ManPage] = &[
    (
        "cat",
        "Show the contents of metadata files.",
        "cat targets [targets ...]",
        Some(("targets", "The metadata files to display.")),
    ),
    (
        "cd",
        "Set the current working directory.",
        "cd [target]",
        Some(("target", "The directory to change to.")),
    ),
    ("exit", "Exit the metadata shell.", "exit", None),
    (
        "find",
        "Search for nodes in the directory hierarchy.",
        "find [paths [paths ...]]",
        Some(("paths", "The paths to start at.")),
    ),
    ("help", "Display this help message.", "help", None),
    (
        "history",
        "Print command history.",
        "history [numEntriesToShow]",
        Some(("numEntriesToShow", "The number of entries to show.")),
    ),
    (
        "ls",
        "List metadata nodes.",
        "ls [targets [targets ...]]",
        Some(("targets", "The metadata node paths to list.")),
    ),
    (
        "man",
        "Show the help text for a specific command.",
        "man cmd",
        Some(("cmd", "The command to get help text for.")),
    ),
    ("pwd", "Print the current working directory.", "pwd", None),
    (
        "tree",
        "Show the contents of metadata nodes in a tree structure.",
        "tree targets [targets ...]",
        Some(("targets", "The metadata nodes to display.")),
    ),
];

/// Runs the shell: one command from `command`, or a session on stdin when it is empty.
///
/// # Errors
/// The image cannot be loaded, or writing to `out` fails.
pub fn run_metadata_shell(
    source: &Source,
    command: &[String],
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let interactive = command.is_empty();
    if interactive {
        writeln!(out, "Loading...")?;
    }
    let mut warnings = std::io::stderr();
    let image = match source {
        Source::Snapshot(file) => load::load_file(file, &mut warnings)?,
        Source::Directory(dir) => load::load_directory(dir, &mut warnings)?,
    };
    let mut shell = Shell::new(tree::root(&image));
    if !interactive {
        let mut text = String::new();
        shell.run(command, false, &mut text);
        out.write_all(text.as_bytes())?;
        return Ok(0);
    }
    writeln!(out, "Starting...")?;
    writeln!(out, "[ Kafka Metadata Shell ]")?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock();
    loop {
        write!(out, ">> ")?;
        out.flush()?;
        let mut line = String::new();
        if lines.read_line(&mut line)? == 0 {
            break;
        }
        let words = split_words(&line);
        if !words.is_empty() {
            shell
                .history
                .push(line.trim_end_matches(['\n', '\r']).to_owned());
        }
        let mut text = String::new();
        let keep_going = shell.run(&words, true, &mut text);
        out.write_all(text.as_bytes())?;
        if !keep_going {
            break;
        }
    }
    out.flush()?;
    Ok(0)
}

/// Splits a command line into words: whitespace separates, single or double quotes group.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            None => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(current);
    }
    words
}

/// A node reached by a path, with its absolute components.
struct Found<'a> {
    path: Vec<String>,
    node: &'a Node,
}

impl Found<'_> {
    fn last_component(&self) -> String {
        self.path.last().cloned().unwrap_or_else(|| "/".to_owned())
    }
}

/// The shell's state: the tree and the working directory.
pub struct Shell {
    root: Node,
    working_directory: String,
    /// Command lines entered so far (interactive only), for `history`.
    history: Vec<String>,
}

/// Path components with `.` dropped and `..` going up (never above `/`).
fn components(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        match part {
            "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other.to_owned()),
        }
    }
    out
}

/// Kafka's `getEffectivePaths`: empty strings dropped, `.` when nothing is left.
fn effective_paths(paths: &[String]) -> Vec<String> {
    let kept: Vec<String> = paths.iter().filter(|p| !p.is_empty()).cloned().collect();
    if kept.is_empty() {
        vec![".".to_owned()]
    } else {
        kept
    }
}

impl Shell {
    /// A shell over `root`, in `/`.
    #[must_use]
    pub fn new(root: Node) -> Self {
        Shell {
            root,
            working_directory: "/".to_owned(),
            history: Vec::new(),
        }
    }

    /// Every node `glob` reaches, in sorted order (Kafka's `GlobVisitor`).
    fn visit(&self, glob: &str) -> Vec<Found<'_>> {
        let full = if glob.starts_with('/') {
            glob.to_owned()
        } else {
            format!("{}/{glob}", self.working_directory)
        };
        let parts = components(&full);
        let mut found = Vec::new();
        Self::walk(&parts, &self.root, Vec::new(), &mut found);
        found
    }

    fn walk<'a>(parts: &[String], node: &'a Node, path: Vec<String>, found: &mut Vec<Found<'a>>) {
        let Some((first, rest)) = parts.split_first() else {
            found.push(Found { path, node });
            return;
        };
        let glob = GlobComponent::new(first);
        if glob.is_literal() {
            if let Some(child) = node.child(glob.component()) {
                let mut next = path;
                next.push(glob.component().to_owned());
                Self::walk(rest, child, next, found);
            }
            return;
        }
        for name in node.child_names() {
            if glob.matches(name)
                && let Some(child) = node.child(name)
            {
                let mut next = path.clone();
                next.push(name.to_owned());
                Self::walk(rest, child, next, found);
            }
        }
    }

    /// Runs one command line (`words[0]` is the command); appends its output to `out`.
    /// Returns `false` when the shell should exit.
    pub fn run(&mut self, words: &[String], interactive: bool, out: &mut String) -> bool {
        let Some((command, args)) = words.split_first() else {
            return true;
        };
        let allowed = if interactive {
            INTERACTIVE
        } else {
            NON_INTERACTIVE
        };
        if !allowed.contains(&command.as_str()) {
            let choices: Vec<String> = allowed.iter().map(|c| format!("'{c}'")).collect();
            out.push_str(&format!(
                "invalid choice: '{command}' (choose from {})\n",
                choices.join(", ")
            ));
            return true;
        }
        // argparse's complaint when a `targets [targets ...]` or `cmd` argument is missing.
        if args.is_empty() && matches!(command.as_str(), "cat" | "tree" | "man") {
            out.push_str("too few arguments\n");
            return true;
        }
        match command.as_str() {
            "ls" => self.ls(args, out),
            "cat" => self.cat(args, out),
            "tree" => self.tree(args, out),
            "history" => self.print_history(args, out),
            "man" => man(&args[0], out),
            "find" => self.find(args, out),
            "cd" => self.cd(args, out),
            "pwd" => {
                out.push_str(&self.working_directory);
                out.push('\n');
            }
            "help" => out.push_str(HELP),
            "exit" => return false,
            _ => {}
        }
        true
    }

    fn ls(&self, targets: &[String], out: &mut String) {
        let mut files = Vec::new();
        let mut dirs: Vec<(String, Vec<String>)> = Vec::new();
        for target in effective_paths(targets) {
            let found = self.visit(&target);
            if found.is_empty() {
                out.push_str(&format!("ls: {target}: no such file or directory.\n"));
            }
            for f in found {
                if f.node.is_dir() {
                    let children = f
                        .node
                        .child_names()
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                    dirs.push((f.last_component(), children));
                } else {
                    files.push(f.last_component());
                }
            }
        }
        for file in &files {
            out.push_str(file);
            out.push('\n');
        }
        let need_intro = !files.is_empty() || dirs.len() > 1;
        let mut first_intro = files.is_empty();
        for (name, children) in dirs {
            if children.is_empty() {
                continue;
            }
            if need_intro {
                if !first_intro {
                    out.push('\n');
                }
                out.push_str(&format!("{name}:\n"));
                first_intro = false;
            }
            for child in children {
                out.push_str(&child);
                out.push('\n');
            }
        }
    }

    fn cat(&self, targets: &[String], out: &mut String) {
        for target in targets {
            let found = self.visit(target);
            if found.is_empty() {
                out.push_str(&format!("cat: {target}: No such file or directory.\n"));
            }
            for f in found {
                if f.node.is_dir() {
                    out.push_str(&format!("cat: {target}: Is a directory\n"));
                } else {
                    f.node.print(0, out);
                }
            }
        }
    }

    fn tree(&self, targets: &[String], out: &mut String) {
        for target in targets {
            let found = self.visit(target);
            if found.is_empty() {
                out.push_str(&format!("tree: {target}: No such file or directory.\n"));
            }
            for f in found {
                f.node.print(0, out);
            }
        }
    }

    fn find(&self, paths: &[String], out: &mut String) {
        fn walk(path: &str, node: &Node, out: &mut String) {
            out.push_str(path);
            out.push('\n');
            for name in node.child_names() {
                if let Some(child) = node.child(name) {
                    let next = if path == "/" {
                        format!("/{name}")
                    } else {
                        format!("{path}/{name}")
                    };
                    walk(&next, child, out);
                }
            }
        }
        for path in effective_paths(paths) {
            let found = self.visit(&path);
            if found.is_empty() {
                out.push_str(&format!("find: {path}: no such file or directory.\n"));
            }
            for f in found {
                walk(&path, f.node, out);
            }
        }
    }

    /// `history [n]`: the last `n` (default all) command lines, numbered from 0.
    fn print_history(&self, args: &[String], out: &mut String) {
        let shown = match args.first().map(|n| n.parse::<usize>()) {
            None => self.history.len(),
            Some(Ok(n)) => n.min(self.history.len()),
            Some(Err(_)) => {
                out.push_str(&format!(
                    "argument numEntriesToShow: could not convert '{}' to Integer\n",
                    args[0]
                ));
                return;
            }
        };
        let first = self.history.len() - shown;
        for (index, line) in self.history.iter().enumerate().skip(first) {
            out.push_str(&format!("{index:5}  {line}\n"));
        }
    }

    fn cd(&mut self, args: &[String], out: &mut String) {
        let target = args.first().map_or("/", String::as_str);
        let found = self.visit(target);
        match found.first() {
            None => out.push_str(&format!("cd: {target}: no such directory.\n")),
            Some(f) if !f.node.is_dir() => {
                out.push_str(&format!("cd: {target}: not a directory.\n"));
            }
            Some(f) => self.working_directory = format!("/{}", f.path.join("/")),
        }
    }
}

/// `man <cmd>`: the command's description, usage and argument, as argparse4j prints them.
fn man(command: &str, out: &mut String) {
    let Some((name, description, usage, argument)) = MAN.iter().find(|m| m.0 == command) else {
        out.push_str(&format!(
            "man: unknown command {command}. Type help to get a list of commands.\n"
        ));
        return;
    };
    out.push_str(&format!("{name}: {description}\n\nusage: {usage}\n"));
    if let Some((argument, help)) = argument {
        out.push_str(&format!(
            "\npositional arguments:\n  {argument:<23}{help}\n"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell() -> Shell {
        Shell::new(tree::root(&krust_metadata::MetadataImage::empty()))
    }

    fn run(shell: &mut Shell, line: &str, interactive: bool) -> String {
        let mut out = String::new();
        shell.run(&split_words(line), interactive, &mut out);
        out
    }

    #[test]
    fn ls_cat_find_cd_behave_like_kafkas_shell() {
        let mut s = shell();
        assert_eq!(run(&mut s, "ls /", false), "image\nlocal\n");
        assert_eq!(
            run(&mut s, "ls /local/version /nope", false).lines().next(),
            Some("ls: /nope: no such file or directory.")
        );
        assert_eq!(
            run(&mut s, "cat /image", false),
            "cat: /image: Is a directory\n"
        );
        assert_eq!(
            run(&mut s, "cat /image/producerIds/nextProducerId", false),
            "-1\n"
        );
        assert_eq!(
            run(&mut s, "find /image/cl*", false),
            "/image/cl*\n/image/cl*\n/image/cl*/brokers\n/image/cl*/controllers\n"
        );
        assert_eq!(
            run(&mut s, "pwd", false),
            "invalid choice: 'pwd' (choose from 'cat', 'find', 'ls', 'tree')\n"
        );
        assert_eq!(run(&mut s, "cd /image/cluster/../topics", true), "");
        assert_eq!(run(&mut s, "pwd", true), "/image/topics\n");
        assert_eq!(run(&mut s, "ls", true), "byId\nbyName\n");
        assert_eq!(
            run(&mut s, "cd /image/provenance", true),
            "cd: /image/provenance: not a directory.\n"
        );
        assert_eq!(
            run(&mut s, "cd /nope", true),
            "cd: /nope: no such directory.\n"
        );
        assert_eq!(
            run(&mut s, "ls /image/cluster /image/features", false),
            "cluster:\nbrokers\ncontrollers\n\nfeatures:\nmetadataVersion\nzkMigrationState\n"
        );
        let mut out = String::new();
        assert!(!s.run(&split_words("exit"), true, &mut out));
    }

    #[test]
    fn command_lines_split_on_whitespace_and_quotes() {
        assert_eq!(split_words("  ls  'a b' \"c\"\n"), ["ls", "a b", "c"]);
        assert!(split_words("   \n").is_empty());
    }
}
