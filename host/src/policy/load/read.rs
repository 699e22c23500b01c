//! Reading a policy file, the first step of a load: a regular file of at
//! most the configured size, with `strict-permissions` owned by root and
//! writable by no one else. It needs no engine, so the records of known
//! policies, `check` and the configuration's own checks read files the way
//! a load does.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::errors::LoadError;
use crate::policy::spec::manifest::PolicySpec;

/// Reads a policy file: a regular file (symlinks followed), at most `max`
/// bytes, checked before it is opened for reading and read through that
/// check's descriptor, so that it cannot be swapped for something else
/// between the check and the read.
pub fn read_policy_file(spec: &PolicySpec, max: u64) -> Result<Vec<u8>, LoadError> {
    let path = &spec.wasm;
    let read_err =
        |reason: String| LoadError::Read { policy: spec.name.clone(), path: path.display().to_string(), reason };
    // Neither a FIFO nor a device behind the name is ever opened
    // (`files::open_regular_following`): a device's open is an action.
    let (file, meta) = crate::files::open_regular_following(path).map_err(|e| match e {
        crate::files::FileError::NotRegular { kind, .. } => {
            LoadError::NotAFile { policy: spec.name.clone(), path: path.display().to_string(), what: kind.into() }
        }
        e => read_err(e.io().map_or_else(|| e.reason(), ToString::to_string)),
    })?;
    if spec.strict_permissions {
        check_permissions(spec, path, &meta)?;
    }
    if meta.len() > max {
        return Err(LoadError::TooLarge { policy: spec.name.clone(), size: meta.len(), limit: max });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| read_err(e.to_string()))?;
    if bytes.len() as u64 > max {
        return Err(LoadError::TooLarge { policy: spec.name.clone(), size: bytes.len() as u64, limit: max });
    }
    Ok(bytes)
}

/// With `strict-permissions`: owned by root, writable by no one else.
pub fn check_permissions(spec: &PolicySpec, path: &Path, meta: &std::fs::Metadata) -> Result<(), LoadError> {
    let problem = if meta.uid() != 0 {
        Some(format!("owned by uid {}, not root", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("writable by group or others (mode {:o})", meta.mode() & 0o7777))
    } else {
        None
    };
    match problem {
        Some(problem) => {
            Err(LoadError::Permissions { policy: spec.name.clone(), path: path.display().to_string(), problem })
        }
        None => Ok(()),
    }
}
