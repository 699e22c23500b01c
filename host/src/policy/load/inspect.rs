//! What can be learnt about a policy file before compiling it, cheaply.
//!
//! Compiling is the expensive step of loading (seconds for a language
//! runtime, and a hostile component can make it take minutes and gigabytes),
//! so everything that can refuse a file is checked first, in one linear
//! pass over its bytes: the size, the binary header (a text file is refused
//! without echoing a byte of it), that it is a component and not a core
//! module, the interfaces it imports (versions included), that it exports
//! the world's two functions, and that its structure fits the limits its
//! instances will get (instances, memories, tables, their initial sizes).
//! The same pass reads what the component declares in its custom sections:
//! its capabilities (`caps.rs`) and its events (`declared.rs`), the latter
//! also at start, before any compile, to know what a policy may subscribe
//! to (`load/known.rs`).
//! Only a file that passes is compiled, within bounds (`compile.rs`).

// Imported memories and tables belong to another instance and are not
// counted; only those a module defines are.
use wasmtime::wasmparser::{ComponentExternalKind, ComponentTypeRef, Encoding, Instance, Parser, Payload};

use super::errors::{LoadError, WIT_VERSION};
use crate::policy::engine::PoolShape;
use crate::policy::spec::declared::{DeclarationError, DeclaredEvents};
use crate::policy::spec::inspection::Inspection;
use crate::policy::spec::limits::Limits;

/// Most bytes of a capability declaration.
const MAX_DECLARATION_BYTES: usize = 4096;

/// Interfaces a policy may import: ours, and the WASI p2 interfaces language
/// runtimes need (linked with an empty context: no files, no env, no network).
pub(crate) const ALLOWED_IMPORTS: [&str; 7] =
    ["nri-wasm:policy/", "wasi:cli/", "wasi:io/", "wasi:clocks/", "wasi:random/", "wasi:filesystem/", "wasi:sockets/"];

/// Why an import is refused, or `None` if it is allowed.
pub fn import_refusal(policy: &str, import: &str) -> Option<LoadError> {
    if import.starts_with("nri-wasm:policy/") && !import.contains(&format!("@{WIT_VERSION}.")) {
        return Some(LoadError::Version { policy: policy.into(), import: import.into() });
    }
    if !ALLOWED_IMPORTS.iter().any(|p| import.starts_with(p)) {
        return Some(LoadError::ForbiddenImport { policy: policy.into(), import: import.into() });
    }
    None
}

/// Bytes in the WebAssembly binary format start with this.
const MAGIC: &[u8; 4] = b"\0asm";

/// The binary form of `bytes`: binary as is, the text format (which tests
/// and `check` accept) converted. Anything else is refused without a word
/// of its content.
pub fn binary<'a>(policy: &str, bytes: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, LoadError> {
    if bytes.starts_with(MAGIC) {
        return Ok(bytes.into());
    }
    let not_wasm = |reason: &str| LoadError::NotWasm { policy: policy.into(), reason: reason.into() };
    let text = std::str::from_utf8(bytes).map_err(|_| not_wasm("no \\0asm header"))?;
    if !text.trim_start().starts_with('(') {
        return Err(not_wasm(if bytes.is_empty() { "the file is empty" } else { "no \\0asm header" }));
    }
    // The text format: parse errors name a line and column, never the text.
    wat::parse_str(text).map(Into::into).map_err(|e| {
        let mut e = e;
        e.set_path("policy");
        let first = e.to_string().lines().next().unwrap_or_default().to_string();
        not_wasm(&format!("text format that does not parse: {}", crate::text::guest_text(&first, 200)))
    })
}

/// One pass over a component: refuses what cannot load, reports what it found.
pub fn inspect(policy: &str, bytes: &[u8], limits: &Limits, pool: &PoolShape) -> Result<Inspection, LoadError> {
    let found = survey(policy, bytes)?;
    check(policy, &found, limits, pool)?;
    Ok(found)
}

/// The pass of [`inspect`] without its refusals: what a component imports,
/// exports and creates, even when the host would refuse it (`nri-wasm
/// check` reports every import, allowed or not). Fails only on what is not
/// a readable component.
pub fn survey(policy: &str, bytes: &[u8]) -> Result<Inspection, LoadError> {
    let invalid = |e: wasmtime::wasmparser::BinaryReaderError| LoadError::Invalid {
        policy: policy.into(),
        reason: format!("{} (at byte {})", e.message(), e.offset()),
    };
    let mut found = Inspection::default();
    // Per nested component: the (memories, tables) each of its core modules
    // defines, by module index. Indices of modules that come from imports
    // or aliases are not tracked; those define nothing counted here.
    let mut components: Vec<Vec<(usize, usize)>> = Vec::new();
    // The module being read, if any: (memories, tables).
    let mut module: Option<(usize, usize)> = None;
    let mut depth = 0usize;
    // The event declaration's sections: there must be at most one.
    let mut event_sections: Vec<&[u8]> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(invalid)? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding == Encoding::Module {
                    return Err(LoadError::CoreModule { policy: policy.into() });
                }
                depth += 1;
                match encoding {
                    Encoding::Component => components.push(Vec::new()),
                    Encoding::Module => {
                        found.core_modules += 1;
                        module = Some((0, 0));
                    }
                }
            }
            Payload::End(_) => {
                depth = depth.saturating_sub(1);
                match module.take() {
                    Some(counts) => {
                        if let Some(c) = components.last_mut() {
                            c.push(counts)
                        }
                    }
                    None => {
                        components.pop();
                    }
                }
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    let memory = memory.map_err(invalid)?;
                    let page = 1u64 << memory.page_size_log2.unwrap_or(16);
                    let initial = memory.initial.saturating_mul(page);
                    found.largest_initial_memory = found.largest_initial_memory.max(initial);
                    if let Some(m) = module.as_mut() {
                        m.0 += 1;
                    }
                }
            }
            Payload::TableSection(reader) => {
                for table in reader {
                    let table = table.map_err(invalid)?;
                    found.largest_initial_table = found.largest_initial_table.max(table.ty.initial);
                    if let Some(m) = module.as_mut() {
                        m.1 += 1;
                    }
                }
            }
            Payload::FunctionSection(reader) => found.functions += u64::from(reader.count()),
            Payload::CodeSectionStart { size, .. } => found.code_bytes += u64::from(size),
            Payload::InstanceSection(reader) => {
                for instance in reader {
                    if let Instance::Instantiate { module_index, .. } = instance.map_err(invalid)? {
                        found.core_instances += 1;
                        let counts: Option<&(usize, usize)> =
                            components.last().and_then(|c| c.get(module_index as usize));
                        let (m, t) = counts.copied().unwrap_or_default();
                        found.memories += m;
                        found.tables += t;
                    }
                }
            }
            Payload::CustomSection(reader) if reader.name() == crate::policy::spec::caps::SECTION => {
                // The size first: a hostile section is refused before it is
                // checked or copied.
                let held = found.declaration.as_ref().map_or(0, String::len);
                if held + 1 + reader.data().len() > MAX_DECLARATION_BYTES {
                    return Err(LoadError::Invalid {
                        policy: policy.into(),
                        reason: format!(
                            "its {} sections hold more than {MAX_DECLARATION_BYTES} bytes",
                            crate::policy::spec::caps::SECTION
                        ),
                    });
                }
                let text = std::str::from_utf8(reader.data()).map_err(|_| LoadError::Invalid {
                    policy: policy.into(),
                    reason: format!("its {} section is not UTF-8", crate::policy::spec::caps::SECTION),
                })?;
                let declaration = found.declaration.get_or_insert_with(String::new);
                declaration.push(' ');
                declaration.push_str(text);
            }
            Payload::CustomSection(reader) if reader.name() == crate::policy::spec::declared::SECTION => {
                event_sections.push(reader.data());
            }
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.map_err(invalid)?;
                    // Types a world `use`s are imported by name: not interfaces.
                    if !matches!(import.ty, ComponentTypeRef::Type(_)) {
                        found.imports.push(import.name.name.to_string());
                    }
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(invalid)?;
                    if export.kind == ComponentExternalKind::Func {
                        found.exports.push(export.name.name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    found.events = events_declared(policy, &event_sections)?;
    found.wit_version = found.imports.iter().find_map(|i| {
        i.strip_prefix("nri-wasm:policy/").and_then(|rest| rest.split_once('@')).map(|(_, v)| v.to_string())
    });
    Ok(found)
}

/// The event declaration of a component whose sections named
/// `declared::SECTION` hold `sections`: none, or exactly one that reads.
/// Nothing of a refused section is echoed but an unknown name, escaped.
fn events_declared(policy: &str, sections: &[&[u8]]) -> Result<Option<DeclaredEvents>, LoadError> {
    let refuse = |error: DeclarationError| LoadError::EventDeclaration { policy: policy.into(), error };
    let data = match sections {
        [] => return Ok(None),
        [one] => *one,
        many => return Err(refuse(DeclarationError::Sections { count: many.len() })),
    };
    // The size first: a hostile section is refused before it is read.
    if data.len() > crate::policy::spec::declared::MAX_BYTES {
        return Err(refuse(DeclarationError::TooLarge { bytes: data.len() }));
    }
    let text = std::str::from_utf8(data).map_err(|e| refuse(DeclarationError::NotUtf8 { at: e.valid_up_to() }))?;
    DeclaredEvents::parse(text).map(Some).map_err(refuse)
}

/// The refusals of an inspection, cheapest first.
fn check(policy: &str, found: &Inspection, limits: &Limits, pool: &PoolShape) -> Result<(), LoadError> {
    for import in &found.imports {
        if let Some(refusal) = import_refusal(policy, import) {
            return Err(refusal);
        }
    }
    for export in ["configure", "handle"] {
        if !found.exports.iter().any(|e| e == export) {
            let reason = format!("it exports no function named {export}");
            return Err(LoadError::World { policy: policy.into(), reason });
        }
    }
    let structure = |what: String, limit: String| LoadError::Structure { policy: policy.into(), what, limit };
    let counts = [
        ("core instances", found.core_instances, pool.core_instances.min(limits.instances), "instances"),
        ("memories", found.memories, pool.memories.min(limits.memories), "memories"),
        ("tables", found.tables, pool.tables.min(limits.tables), "tables"),
    ];
    for (what, n, max, key) in counts {
        if n > max {
            return Err(structure(
                format!("it creates {n} {what}"),
                format!("at most {max} per policy: the engine's pool and the `{key}` limit"),
            ));
        }
    }
    let memory_limit = limits.memory_bytes() as u64;
    if found.largest_initial_memory > memory_limit.min(pool.max_memory_bytes) {
        return Err(structure(
            format!("a memory starts at {} bytes", found.largest_initial_memory),
            format!("memory-mib is {} MiB", limits.memory_mib),
        ));
    }
    if found.largest_initial_table > limits.table_elements as u64 {
        return Err(structure(
            format!("a table starts with {} elements", found.largest_initial_table),
            format!("table-elements is {}", limits.table_elements),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: PoolShape = PoolShape { core_instances: 16, memories: 4, tables: 16, max_memory_bytes: 256 << 20 };

    /// Unsigned LEB128.
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
    }

    /// A custom section: id 0, size, name length, name, content.
    fn custom(name: &str, content: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        leb128(name.len(), &mut body);
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(content);
        let mut out = vec![0];
        leb128(body.len(), &mut out);
        out.extend(body);
        out
    }

    #[test]
    fn the_event_declaration_is_one_section_of_known_names() {
        use crate::policy::spec::declared::SECTION;
        let with = |sections: &[(&str, &[u8])]| {
            let mut bytes = wat::parse_str("(component)").unwrap();
            for (name, content) in sections {
                bytes.extend(custom(name, content));
            }
            survey("10-p", &bytes)
        };
        assert_eq!(with(&[]).unwrap().events, None, "no declaration: nothing known");
        let found = with(&[(SECTION, b"create-container, synchronize"), ("other", b"stop-container")]).unwrap();
        assert_eq!(found.events.unwrap().describe(), "create-container, synchronize");
        let refused = |sections: &[(&str, &[u8])]| with(sections).unwrap_err().to_string();
        let prefix = "policy 10-p: event declaration (nri-wasm:events): ";
        let e = refused(&[(SECTION, b"create-container"), (SECTION, b"stop-container")]);
        assert_eq!(
            e,
            format!(
                "{prefix}the component has 2 such sections; one declaration is expected (which would be the policy's?)"
            )
        );
        let e = refused(&[(SECTION, b"create-container, exec-into-host")]);
        assert!(
            e.starts_with(&format!("{prefix}declares event \"exec-into-host\", which this host does not know")),
            "{e}"
        );
        let e = refused(&[(SECTION, b"create-container\x1b]0;owned\x07")]);
        assert_eq!(e, format!("{prefix}holds the control character U+001B at byte 16"));
        assert!(!e.contains("owned"));
        let e = refused(&[(SECTION, &vec![b' '; 1 << 20])]);
        assert_eq!(e, format!("{prefix}1048576 bytes, more than the 1024 a declaration may have"));
        let e = refused(&[(SECTION, b"create-container \xff")]);
        assert_eq!(e, format!("{prefix}not UTF-8 (at byte 17)"));
    }

    #[test]
    fn the_capability_declaration_is_read_from_every_section() {
        let mut bytes = wat::parse_str("(component)").unwrap();
        assert_eq!(survey("p", &bytes).unwrap().declaration, None);
        bytes.extend(custom(crate::policy::spec::caps::SECTION, b"env,hooks"));
        bytes.extend(custom("other", b"mounts"));
        bytes.extend(custom(crate::policy::spec::caps::SECTION, b"deny"));
        let text = survey("p", &bytes).unwrap().declaration.unwrap();
        assert_eq!(crate::policy::spec::caps::parse_declaration(&text).unwrap().describe(), "env, deny, hooks");
        let mut bad = wat::parse_str("(component)").unwrap();
        bad.extend(custom(crate::policy::spec::caps::SECTION, b"\xff"));
        let e = survey("p", &bad).unwrap_err().to_string();
        assert!(e.contains("nri-wasm:capabilities section is not UTF-8"), "{e}");
    }

    fn run(wat: &str) -> Result<Inspection, LoadError> {
        let bytes = binary("10-x", wat.as_bytes())?;
        inspect("10-x", &bytes, &Limits::default(), &POOL)
    }

    const WORLD: &str = r#"
        (core module $m
            (memory (export "memory") 1)
            (table 3 funcref)
            (func (export "configure") (param i32 i32) (result i32) unreachable)
            (func (export "handle") (param i32) (result i32) unreachable))
        (core instance $i (instantiate $m))
    "#;

    #[test]
    fn text_files_that_are_not_wasm_are_refused_without_echo() {
        let secret = b"password=hunter2\nsecond line\n";
        let e = binary("10-x", secret).unwrap_err();
        assert_eq!(e.to_string(), "policy 10-x: not a WebAssembly file (no \\0asm header)");
        let e = binary("10-x", &[0xff, 0xfe, 0x00, 0x01]).unwrap_err();
        assert!(matches!(e, LoadError::NotWasm { .. }), "{e}");
        let e = binary("10-x", b"").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = binary("10-x", b"(component (hunter2))").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn a_core_module_is_told_to_become_a_component() {
        let e = run("(module)").unwrap_err();
        assert!(matches!(e, LoadError::CoreModule { .. }), "{e}");
    }

    #[test]
    fn exports_imports_and_structure_are_found() {
        let wat = format!(
            r#"(component
                (import "wasi:cli/stdout@0.2.6" (instance))
                (import "nri-wasm:policy/host@0.3.0" (instance))
                {WORLD}
                (func (export "configure") (param "s" string) (result u32) (canon lift (core func $i "configure") (memory (core memory $i "memory"))))
                (func (export "handle") (param "k" u32) (result u32) (canon lift (core func $i "handle")))
            )"#
        );
        let found = run(&wat).unwrap();
        assert_eq!(found.imports, ["wasi:cli/stdout@0.2.6", "nri-wasm:policy/host@0.3.0"]);
        assert_eq!(found.exports, ["configure", "handle"]);
        assert_eq!(found.wit_version.as_deref(), Some("0.3.0"));
        assert_eq!((found.core_modules, found.core_instances, found.memories, found.tables), (1, 1, 1, 1));
        assert_eq!((found.functions, found.largest_initial_memory, found.largest_initial_table), (2, 65536, 3));
    }

    #[test]
    fn refusals_name_the_import_the_export_or_the_limit() {
        let e = run(r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#).unwrap_err();
        assert!(matches!(&e, LoadError::ForbiddenImport { import, .. } if import.starts_with("wasi:http")), "{e}");
        let e = run(r#"(component (import "nri-wasm:policy/host@0.2.0" (instance)))"#).unwrap_err();
        assert!(e.to_string().contains("rebuild it against 0.3"), "{e}");
        let e = run("(component)").unwrap_err();
        assert!(e.to_string().contains("no function named configure"), "{e}");
        let many = (0..20).map(|i| format!("(core instance $x{i} (instantiate $m))")).collect::<String>();
        let wat = format!(
            r#"(component {WORLD} {many}
                (func (export "configure") (param "s" string) (result u32) (canon lift (core func $i "configure") (memory (core memory $i "memory"))))
                (func (export "handle") (param "k" u32) (result u32) (canon lift (core func $i "handle"))))"#
        );
        let e = run(&wat).unwrap_err();
        assert!(e.to_string().contains("it creates 21 core instances"), "{e}");
        let big = WORLD.replace("(memory (export \"memory\") 1)", "(memory (export \"memory\") 2000)");
        let wat = format!(
            r#"(component {big}
                (func (export "configure") (param "s" string) (result u32) (canon lift (core func $i "configure") (memory (core memory $i "memory"))))
                (func (export "handle") (param "k" u32) (result u32) (canon lift (core func $i "handle"))))"#
        );
        let e = run(&wat).unwrap_err();
        assert!(e.to_string().contains("a memory starts at 131072000 bytes"), "{e}");
    }
}
