//! The cluster's certificates, made for each test with openssl: a CA,
//! serving certificates for the API server and the kubelet, client
//! certificates for each component, and the service-account signing key.
//! ECDSA P-256 keys, valid for two days: quick to make, and nothing
//! outlives the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use nri_wasm_runtimes::process;

use crate::Error;

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every credential the cluster uses, in one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca: Pair,
    pub apiserver: Pair,
    pub apiserver_kubelet_client: Pair,
    pub admin: Pair,
    pub controller_manager: Pair,
    pub scheduler: Pair,
    pub kubelet_client: Pair,
    pub kubelet_serving: Pair,
    /// The service-account signing key and its public half.
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

fn openssl(args: &[&str], what: &str) -> Result<String, Error> {
    let mut cmd = Command::new("openssl");
    cmd.args(args);
    process::run(cmd, &format!("openssl ({what})")).map_err(Error::from)
}

fn new_key(path: &Path) -> Result<(), Error> {
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &path.to_string_lossy()], "a key")?;
    // SEC1 to PKCS#8, which every component reads.
    let tmp = path.with_extension("pk8");
    openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", &path.to_string_lossy(), "-out", &tmp.to_string_lossy()], "a key")?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("installing a key", e))
}

/// A certificate for `subject` signed by `ca`, written to `dir/<name>.crt`
/// and `.key`.
fn issue(dir: &Path, ca: &Pair, name: &str, subject: &str, usage: &str, san: Option<String>) -> Result<Pair, Error> {
    let p = |n: &str| dir.join(n);
    let pair = Pair { cert: p(&format!("{name}.crt")), key: p(&format!("{name}.key")) };
    new_key(&pair.key)?;
    let csr = p(&format!("{name}.csr"));
    openssl(
        &["req", "-new", "-key", &pair.key.to_string_lossy(), "-out", &csr.to_string_lossy(), "-subj", subject],
        name,
    )?;
    let ext = p(&format!("{name}.ext"));
    let mut text = format!(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n\
         authorityKeyIdentifier=keyid\n"
    );
    if let Some(san) = san {
        text += &format!("subjectAltName={san}\n");
    }
    std::fs::write(&ext, text).map_err(|e| Error::io("writing a certificate's extensions", e))?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &csr.to_string_lossy(),
            "-CA",
            &ca.cert.to_string_lossy(),
            "-CAkey",
            &ca.key.to_string_lossy(),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &pair.cert.to_string_lossy(),
            "-extfile",
            &ext.to_string_lossy(),
        ],
        name,
    )?;
    Ok(pair)
}

impl Pki {
    /// A serving certificate from the cluster's CA for `san` (e.g.
    /// `IP:192.168.250.1`): a registry on the node, say.
    pub fn server_cert(&self, name: &str, san: &str) -> Result<Pair, Error> {
        issue(&self.dir, &self.ca, name, &format!("/CN={name}"), "serverAuth", Some(san.to_string()))
    }

    /// Makes everything in `dir` for a node named `node` at `node_ip`.
    pub fn create(dir: &Path, node: &str, node_ip: &str) -> Result<Pki, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating the PKI directory", e))?;
        let p = |n: &str| dir.join(n);
        let ca = Pair { cert: p("ca.crt"), key: p("ca.key") };
        new_key(&ca.key)?;
        openssl(
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &ca.key.to_string_lossy(),
                "-out",
                &ca.cert.to_string_lossy(),
                // openssl's v3_ca section makes it a CA (basicConstraints).
                "-days",
                "2",
                "-subj",
                "/CN=nri-wasm-test-cluster-ca",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            "the CA",
        )?;
        let leaf =
            |name: &str, subject: &str, usage: &str, san: Option<String>| issue(dir, &ca, name, subject, usage, san);
        let server_san = format!(
            "IP:127.0.0.1,IP:{node_ip},IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
             DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        );
        let apiserver = leaf("apiserver", "/CN=kube-apiserver", "serverAuth", Some(server_san))?;
        let apiserver_kubelet_client =
            leaf("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth", None)?;
        let admin = leaf("admin", "/O=system:masters/CN=nri-wasm-test-admin", "clientAuth", None)?;
        let controller_manager = leaf("controller-manager", "/CN=system:kube-controller-manager", "clientAuth", None)?;
        let scheduler = leaf("scheduler", "/CN=system:kube-scheduler", "clientAuth", None)?;
        let kubelet_client =
            leaf("kubelet-client", &format!("/O=system:nodes/CN=system:node:{node}"), "clientAuth", None)?;
        let kubelet_serving = leaf(
            "kubelet-serving",
            &format!("/O=system:nodes/CN=system:node:{node}"),
            "serverAuth",
            Some(format!("IP:127.0.0.1,IP:{node_ip},DNS:{node}")),
        )?;
        let service_account_key = p("service-account.key");
        new_key(&service_account_key)?;
        let service_account_pub = p("service-account.pub");
        openssl(
            &[
                "pkey",
                "-in",
                &service_account_key.to_string_lossy(),
                "-pubout",
                "-out",
                &service_account_pub.to_string_lossy(),
            ],
            "the service-account key",
        )?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            ca,
            apiserver,
            apiserver_kubelet_client,
            admin,
            controller_manager,
            scheduler,
            kubelet_client,
            kubelet_serving,
            service_account_key,
            service_account_pub,
        })
    }

    /// A kubeconfig for `client` at `server`, written to `path`.
    pub fn kubeconfig(&self, path: &Path, server: &str, client: &Pair) -> Result<PathBuf, Error> {
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
             users:\n- name: user\n  user:\n    client-certificate: {}\n    client-key: {}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: user\n\
             current-context: test\n",
            self.ca.cert.display(),
            client.cert.display(),
            client.key.display(),
        );
        std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path.to_path_buf())
    }
}
