//! Reading a policy file, the first step of a load: a regular file of at
//! most the configured size, with `strict-permissions` owned by root and
//! writable by no one else. It needs no engine, so the records of known
//! policies, `check` and the configuration's own checks read files the way
//! a load does.

use std::io::Read as _;
use std::path::Path;

use super::errors::LoadError;
use crate::files::Trust;
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
    Trust::root().check(meta).map_err(|problem| LoadError::Permissions {
        policy: spec.name.clone(),
        path: path.display().to_string(),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::files::{Distrust, Owner};

    /// With `strict-permissions`, a policy file is read only if root owns
    /// it and no one else may write it; the refusal names the policy, the
    /// file and what breaks the rule. Without it, the same file loads.
    #[test]
    fn strict_permissions_refuse_a_file_root_does_not_own_or_others_may_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, b"\0asm").unwrap();
        let mut spec = PolicySpec::new("10-p", path.clone());
        let refusal = |spec: &PolicySpec| match read_policy_file(spec, 1 << 20) {
            Err(LoadError::Permissions { policy, path: refused, problem }) => {
                assert_eq!((policy.as_str(), refused.as_str()), ("10-p", path.to_str().unwrap()));
                problem
            }
            other => panic!("not refused for its permissions: {other:?}"),
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert_eq!(read_policy_file(&spec, 1 << 20).unwrap(), b"\0asm", "not strict: loaded");
        spec.strict_permissions = true;
        let uid = Trust::effective_uid();
        if uid == 0 {
            assert_eq!(refusal(&spec), Distrust::Mode { mode: 0o664, readable: false });
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert_eq!(read_policy_file(&spec, 1 << 20).unwrap(), b"\0asm", "root's, writable by root alone");
            std::os::unix::fs::chown(&path, Some(1000), None).unwrap();
        }
        let problem = refusal(&spec);
        let owner = if uid == 0 { 1000 } else { uid };
        assert_eq!(problem, Distrust::Owner { owner, expected: Owner::Root });
        let e = read_policy_file(&spec, 1 << 20).unwrap_err().to_string();
        assert!(e.contains(&format!("owned by uid {owner}, not by root")) && e.contains("strict-permissions"), "{e}");
    }
}
