use std::path::PathBuf;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn pair(names: &[&str]) -> (String, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let c = rcgen::generate_simple_self_signed(names).unwrap();
    (c.cert.pem(), c.signing_key.serialize_pem())
}

#[test]
fn a_matching_pair_loads_with_its_names() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pair(&["a.test", "*.b.test"]);
    let c = write(dir.path(), "c.pem", &cert);
    let k = write(dir.path(), "k.pem", &key);
    let loaded = load(&c, &k, &crate::server::provider()).unwrap();
    assert_eq!(loaded.names, ["a.test", "*.b.test"]);
    assert!(loaded.covers("A.test"));
    assert!(loaded.covers("x.b.test"));
    assert!(!loaded.covers("b.test"));
    assert!(!loaded.covers("y.x.b.test"));
    assert!(!loaded.covers("c.test"));
}

#[test]
fn every_problem_names_the_file_and_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pair(&["a.test"]);
    let (_, other_key) = pair(&["a.test"]);
    let c = write(dir.path(), "c.pem", &cert);
    let k = write(dir.path(), "k.pem", &key);
    let wrong = write(dir.path(), "wrong.pem", &other_key);
    let junk = write(dir.path(), "junk.pem", "hello\n");
    let missing = dir.path().join("missing.pem");
    let p = crate::server::provider();
    let err = |c: &Path, k: &Path| load(c, k, &p).unwrap_err();

    let e = err(&missing, &k);
    assert!(
        e.contains("missing.pem") && e.contains("cannot read"),
        "{e}"
    );
    let e = err(&c, &missing);
    assert!(e.contains("key") && e.contains("missing.pem"), "{e}");
    let e = err(&junk, &k);
    assert!(
        e.contains("junk.pem") && e.contains("no certificate"),
        "{e}"
    );
    let e = err(&c, &junk);
    assert!(
        e.contains("junk.pem") && e.contains("no private key"),
        "{e}"
    );
    let e = err(&c, &wrong);
    assert!(
        e.contains("does not match") && e.contains("wrong.pem"),
        "{e}"
    );
    // A key where the certificate should be.
    let e = err(&k, &k);
    assert!(e.contains("no certificate"), "{e}");
}

#[test]
fn an_expired_certificate_is_refused_with_its_date() {
    let dir = tempfile::tempdir().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["old.test".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 2, 3);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let c = write(dir.path(), "c.pem", &cert.pem());
    let k = write(dir.path(), "k.pem", &key.serialize_pem());
    let e = load(&c, &k, &crate::server::provider()).unwrap_err();
    assert!(e.contains("expired on 2001-02-03"), "{e}");
}

#[test]
fn sites_choose_by_name_then_wildcard_then_default() {
    let p = crate::server::provider();
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Vec::new();
    for (i, n) in ["d.test", "a.test", "w.test"].iter().enumerate() {
        let (cert, key) = pair(&[n]);
        let c = write(dir.path(), &format!("c{i}.pem"), &cert);
        let k = write(dir.path(), &format!("k{i}.pem"), &key);
        keys.push(load(&c, &k, &p).unwrap().key);
    }
    let mut sites = crate::Sites::new(Some(keys[0].clone()));
    sites.add("a.test", keys[1].clone());
    sites.add("*.w.test", keys[2].clone());
    let same = |a: Option<Arc<CertifiedKey>>, b: &Arc<CertifiedKey>| Arc::ptr_eq(&a.unwrap(), b);
    assert!(same(sites.choose(Some("A.TEST")), &keys[1]));
    assert!(same(sites.choose(Some("x.w.test")), &keys[2]));
    assert!(same(sites.choose(Some("w.test")), &keys[0]));
    assert!(same(sites.choose(None), &keys[0]));
    assert!(crate::Sites::new(None).choose(Some("a.test")).is_none());
}
