//! The policy's text form and decisions, table-driven.

use std::net::IpAddr;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn check(policy: &str, host: &str, port: u16, resolved: &[&str]) -> Verdict {
    let resolved: Vec<IpAddr> = resolved.iter().map(|s| ip(s)).collect();
    EgressPolicy::parse(policy).unwrap().check(host, port, &resolved)
}

#[test]
fn texts_parse_to_a_canonical_form() {
    for (raw, canonical) in [
        ("all", "all"),
        (" NONE ", "none"),
        ("pypi.org, *.PythonHosted.org:443", "pypi.org,*.pythonhosted.org:443"),
        ("10.1.2.3/8 192.0.2.7", "10.0.0.0/8,192.0.2.7"),
        ("[2001:db8::1]:443,2001:db8::/32", "[2001:db8::1]:443,2001:db8::/32"),
    ] {
        assert_eq!(EgressPolicy::parse(raw).unwrap().to_string(), canonical, "{raw}");
    }
}

#[test]
fn bad_destinations_are_one_line_each() {
    for (raw, says) in [
        ("pypi.org:0", "port is not 1-65535"),
        ("pypi.org:http", "port is not 1-65535"),
        ("10.0.0.0/33", "bad prefix length"),
        ("bad host!", "not a host name"),
        ("all,pypi.org", "cannot be mixed"),
        ("*.", "not a host name"),
    ] {
        let e = EgressPolicy::parse(raw).unwrap_err();
        assert!(e.contains(says) && !e.contains('\n'), "{raw}: {e}");
    }
}

#[test]
fn names_addresses_and_ports_are_decided() {
    let allowed = |v: Verdict| matches!(v, Verdict::Allow(_));
    let p = "pypi.org,*.pythonhosted.org:443,10.9.0.0/16,internal.test";
    assert!(allowed(check(p, "pypi.org", 443, &["151.101.0.223"])));
    assert!(allowed(check(p, "PyPI.org.", 80, &["151.101.0.223"])));
    assert!(allowed(check(p, "files.pythonhosted.org", 443, &["151.101.0.223"])));
    assert!(!allowed(check(p, "files.pythonhosted.org", 80, &["151.101.0.223"])), "port");
    assert!(!allowed(check(p, "pythonhosted.org", 443, &["151.101.0.223"])), "wildcard needs a label");
    assert!(!allowed(check(p, "evil.org", 443, &["151.101.0.223"])), "unlisted");
    assert!(!allowed(check(p, "151.101.0.223", 443, &[])), "raw public address");
    assert!(allowed(check(p, "10.9.3.4", 80, &[])), "raw listed address");
    // A listed name whose DNS points inside: refused unless the address is listed.
    assert!(!allowed(check(p, "pypi.org", 443, &["169.254.169.254"])));
    assert!(!allowed(check(p, "internal.test", 80, &["10.8.0.1"])));
    assert_eq!(check(p, "internal.test", 80, &["10.9.0.1", "10.8.0.1"]), Verdict::Allow(vec![ip("10.9.0.1")]));
    assert!(!allowed(check("none", "pypi.org", 443, &["151.101.0.223"])));
    assert!(allowed(check("all", "evil.org", 443, &["151.101.0.223"])));
}

#[test]
fn only_listed_names_get_dns_answers() {
    let p = EgressPolicy::parse("pypi.org:443,*.example.com").unwrap();
    assert!(p.allows_name("pypi.org.", None));
    assert!(p.allows_name("a.example.com", Some(80)));
    assert!(!p.allows_name("pypi.org", Some(80)));
    assert!(!p.allows_name("example.com", None));
    assert!(!p.allows_name("evil.org", None));
    assert_eq!(p.dns_answer("evil.org", &[ip("151.101.0.223")]), None);
    let q = EgressPolicy::parse("a.test,10.1.0.0/16:80").unwrap();
    assert_eq!(q.dns_answer("a.test", &[ip("10.1.2.3"), ip("10.2.0.1")]), Some(vec![ip("10.1.2.3")]));
}

#[test]
fn private_addresses_are_not_public() {
    for a in ["10.0.0.1", "172.17.0.2", "192.168.1.1", "127.0.0.1", "169.254.169.254", "100.64.0.1", "::1", "fd00::1"] {
        assert!(!is_public(&ip(a)), "{a}");
    }
    for a in ["151.101.0.223", "2a04:4e42::223"] {
        assert!(is_public(&ip(a)), "{a}");
    }
}

#[test]
fn the_label_tells_the_truth() {
    assert_eq!(EgressPolicy::All.label(), "off");
    assert_eq!(EgressPolicy::None.label(), "off");
    let p = EgressPolicy::parse("pypi.org").unwrap();
    assert!(p.label().starts_with("berth-") && p.label() != EgressPolicy::parse("npmjs.org").unwrap().label());
}
