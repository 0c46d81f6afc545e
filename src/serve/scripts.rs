//! Models backed by files (`scripted:PATH`) over the API. They are for the command line
//! and tests: a client that could name any path would have the server open it, and learn
//! from the answer whether it exists, or have it replayed as the assistant's reply. So
//! the server refuses them, unless its operator names a directory (`--scripts DIR`); then
//! only files inside it are read, and a path is judged by its text before any file is
//! touched.

use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;

use super::error::ApiError;

/// Where scripted models may come from: nowhere, or one directory (canonical).
#[derive(Debug, Clone, Default)]
pub struct Scripts(Option<PathBuf>);

impl Scripts {
    /// Scripts from `dir` (which must be a directory), or none.
    pub fn new(dir: Option<&Path>) -> anyhow::Result<Scripts> {
        let Some(dir) = dir else { return Ok(Scripts(None)) };
        let canonical = dir.canonicalize().with_context(|| format!("cannot use {} for --scripts", dir.display()))?;
        anyhow::ensure!(canonical.is_dir(), "--scripts {} is not a directory", dir.display());
        Ok(Scripts(Some(canonical)))
    }

    /// The model string to use for `spec`: itself unless it is a scripted model, which is
    /// refused, or named by its canonical path inside the allowed directory.
    pub fn check(&self, spec: &str) -> Result<String, ApiError> {
        let Some(("scripted", path)) = spec.trim().split_once(':') else { return Ok(spec.to_string()) };
        let Some(dir) = &self.0 else {
            return Err(ApiError::unprocessable(format!(
                "models backed by files (`scripted:PATH`) are for the command line and tests: the server opens no \
                 file a client names (its operator may allow a directory with `{} serve --scripts DIR`); \
                 choose offline, openai:MODEL, anthropic:MODEL or ollama:MODEL",
                crate::program::name()
            )));
        };
        let outside = || {
            ApiError::unprocessable(format!(
                "a scripted model must be a file in the directory this server was given with --scripts ({}), \
                 named without `..`",
                dir.display()
            ))
        };
        let path = Path::new(path.trim());
        if path.components().any(|part| matches!(part, Component::ParentDir)) {
            return Err(outside());
        }
        let path = dir.join(path);
        if !path.starts_with(dir) {
            return Err(outside());
        }
        // Inside the directory: what is there may be said. A link in it may lead out.
        let canonical = path
            .canonicalize()
            .map_err(|e| ApiError::unprocessable(format!("cannot read the script {}: {e}", path.display())))?;
        if !canonical.starts_with(dir) {
            return Err(outside());
        }
        Ok(format!("scripted:{}", canonical.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn scripts_are_refused_unless_they_are_files_in_the_directory_given() {
        let spec = "scripted:/etc/passwd";
        let refused = Scripts::default().check(spec).expect_err("no directory given");
        assert!(format!("{refused:?}").contains("--scripts DIR"), "{refused:?}");
        assert_eq!(Scripts::default().check(" offline ").expect("any other model"), " offline ");

        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("turns.json"), "[]").expect("script");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("out")).expect("link");
        let scripts = Scripts::new(Some(dir.path())).expect("a directory");
        let allowed = scripts.check("scripted:turns.json").expect("inside");
        assert!(allowed.ends_with("turns.json") && allowed.starts_with("scripted:/"), "{allowed}");
        let absolute = format!("scripted:{}", dir.path().join("turns.json").display());
        assert_eq!(scripts.check(&absolute).expect("inside, named whole"), allowed);
        for outside in ["scripted:/etc/passwd", "scripted:../x", "scripted:out", "scripted:/nonexistent/secret"] {
            let error = format!("{:?}", scripts.check(outside).expect_err(outside));
            assert!(error.contains("must be a file in the directory"), "{outside}: {error}");
        }
    }
}
