//! A Containerfile (Dockerfile syntax) as stages of instructions: enough to
//! check what it builds, copies and runs without building it.

/// One instruction, continuation lines joined, its keyword upper-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
    /// Line of the instruction's first line (1-based).
    pub line: usize,
}

/// A build stage: a `FROM` and what follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub image: String,
    pub name: Option<String>,
    pub instructions: Vec<Instruction>,
}

impl Stage {
    pub fn all(&self, keyword: &str) -> impl Iterator<Item = &Instruction> {
        let keyword = keyword.to_ascii_uppercase();
        self.instructions.iter().filter(move |i| i.keyword == keyword)
    }

    pub fn last(&self, keyword: &str) -> Option<&Instruction> {
        self.all(keyword).last()
    }
}

/// The whole file: `ARG`s before the first `FROM`, then the stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Containerfile {
    pub global_args: Vec<Instruction>,
    pub stages: Vec<Stage>,
}

impl Containerfile {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut instructions = Vec::new();
        let mut current: Option<(usize, String)> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            // Comments (parser directives included) and blank lines; within
            // a continued instruction they are skipped too, as the builders do.
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (body, continued) = match line.strip_suffix('\\') {
                Some(body) => (body.trim_end(), true),
                None => (line, false),
            };
            match &mut current {
                Some((_, text)) => {
                    text.push(' ');
                    text.push_str(body);
                }
                None => current = Some((i + 1, body.to_string())),
            }
            if !continued {
                let (line, text) = current.take().expect("an instruction under way");
                let (keyword, args) = text.split_once(char::is_whitespace).unwrap_or((text.as_str(), ""));
                instructions.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_string(),
                    line,
                });
            }
        }
        if let Some((line, _)) = current {
            return Err(format!("line {line}: the instruction's last line ends with a backslash"));
        }
        let mut global_args = Vec::new();
        let mut stages: Vec<Stage> = Vec::new();
        for ins in instructions {
            if ins.keyword == "FROM" {
                let words: Vec<&str> = ins.args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
                let (image, name) = match words.as_slice() {
                    [image] => (image.to_string(), None),
                    [image, as_, name] if as_.eq_ignore_ascii_case("as") => (image.to_string(), Some(name.to_string())),
                    _ => return Err(format!("line {}: FROM {:?} is not `FROM image [AS name]`", ins.line, ins.args)),
                };
                stages.push(Stage { image, name, instructions: Vec::new() });
            } else if let Some(stage) = stages.last_mut() {
                stage.instructions.push(ins);
            } else if ins.keyword == "ARG" {
                global_args.push(ins);
            } else {
                return Err(format!("line {}: {} before the first FROM", ins.line, ins.keyword));
            }
        }
        Ok(Self { global_args, stages })
    }

    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name.as_deref() == Some(name))
    }

    /// The default value of a global `ARG`.
    pub fn global_arg(&self, name: &str) -> Option<String> {
        self.global_args.iter().find_map(|a| {
            let (n, v) = a.args.split_once('=')?;
            (n.trim() == name).then(|| v.trim().trim_matches('"').to_string())
        })
    }
}

/// The commands of a `RUN` in shell form: BuildKit flags (`--mount=...`)
/// dropped, split at `&&` and `;`, each split into words. Quoting is not
/// interpreted; the checks look at plain words.
pub fn shell_commands(run_args: &str) -> Vec<Vec<String>> {
    let mut words: Vec<&str> = run_args.split_whitespace().collect();
    while words.first().is_some_and(|w| w.starts_with("--")) {
        words.remove(0);
    }
    let mut commands = vec![Vec::new()];
    for w in words {
        if w == "&&" || w == ";" || w == "||" {
            commands.push(Vec::new());
        } else {
            commands.last_mut().expect("one command at least").push(w.to_string());
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The words of an instruction in exec form (`["a", "b"]`).
pub fn exec_form(args: &str) -> Result<Vec<String>, String> {
    serde_json::from_str(args).map_err(|e| format!("{args:?} is not in exec form (a JSON array of strings): {e}"))
}

/// `COPY` arguments: its `--from=` stage if any, the sources and the
/// destination.
pub fn copy_args(args: &str) -> (Option<String>, Vec<String>, String) {
    let mut from = None;
    let mut paths = Vec::new();
    for w in args.split_whitespace() {
        if let Some(stage) = w.strip_prefix("--from=") {
            from = Some(stage.to_string());
        } else if !w.starts_with("--") {
            paths.push(w.to_string());
        }
    }
    let dest = paths.pop().unwrap_or_default();
    (from, paths, dest)
}
