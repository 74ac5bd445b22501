use tern_proto::delegation::Party;

use super::*;

const NOW: u64 = 1_800_000_000_000;
const A: &str = "SHA256:daemon-a";
const B: &str = "SHA256:daemon-b";
const TICKET: [u8; 16] = [0x7e; 16];

fn delegation(nonce: u8) -> Delegation {
    Delegation {
        nonce: [nonce; 16],
        issued_at_ms: NOW,
        not_after_ms: NOW + 60_000,
        issuer: None,
        source: Party {
            fingerprint: A.into(),
            name: "a:4747".into(),
            binding: [1; 32],
        },
        dest: Party {
            fingerprint: B.into(),
            name: "b:4747".into(),
            binding: [2; 32],
        },
        dialer: Dialer::Dest,
        sources: vec!["run1/big.h5".into()],
        recursive: false,
        dest_path: "in/".into(),
        top_level: 1,
    }
}

fn issuer() -> Issuer {
    Issuer::from_seed(&[9; 32])
}

fn at(role: TpcRole, now_ms: u64) -> Connection<'static> {
    match role {
        TpcRole::Source => Connection {
            role,
            own_fingerprint: A,
            binding: [1; 32],
            client: None,
            knows_clients: true,
            now_ms,
        },
        TpcRole::Dest => Connection {
            role,
            own_fingerprint: B,
            binding: [2; 32],
            client: None,
            knows_clients: true,
            now_ms,
        },
    }
}

#[test]
fn the_key_is_ed25519_as_rfc_8032_derives_it() {
    // RFC 8032 §7.1, test 1: this seed has this public key.
    let seed: [u8; 32] =
        hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
            .unwrap()
            .try_into()
            .unwrap();
    let signed = Issuer::from_seed(&seed).sign(&delegation(1));
    assert_eq!(
        hex::encode(signed.key),
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    );
    assert_eq!(signed.signature.len(), 64);
    assert_eq!(verify(&signed), Ok(delegation(1)));
}

#[test]
fn a_changed_body_key_or_signature_does_not_verify() {
    let signed = issuer().sign(&delegation(1));
    let mut body = signed.clone();
    let last = body.body.len() - 1;
    body.body[last] ^= 1;
    assert_eq!(verify(&body), Err(Refusal::BadSignature));
    let other_key = SignedDelegation {
        key: Issuer::from_seed(&[8; 32]).sign(&delegation(1)).key,
        ..signed.clone()
    };
    assert_eq!(verify(&other_key), Err(Refusal::BadSignature));
    let mut sig = signed.clone();
    sig.signature[0] ^= 1;
    assert_eq!(verify(&sig), Err(Refusal::BadSignature));
    sig.signature.truncate(10);
    assert_eq!(verify(&sig), Err(Refusal::BadSignature));
}

#[test]
fn each_daemon_accepts_it_once_on_the_connection_it_was_made_for() {
    let signed = issuer().sign(&delegation(1));
    let (mut a, mut b) = (Ledger::default(), Ledger::default());
    assert!(a.accept(&signed, &at(TpcRole::Source, NOW), TICKET).is_ok());
    assert!(b.accept(&signed, &at(TpcRole::Dest, NOW), TICKET).is_ok());
    // Again on either: a replay.
    assert_eq!(
        a.accept(&signed, &at(TpcRole::Source, NOW + 1), TICKET),
        Err(Refusal::Replayed)
    );
    // B's delegation shown to A as if A were the destination: not A's.
    let mut c = Ledger::default();
    let as_dest = Connection {
        own_fingerprint: A,
        ..at(TpcRole::Dest, NOW)
    };
    assert!(matches!(
        c.accept(&signed, &as_dest, TICKET),
        Err(Refusal::OtherDaemon { .. })
    ));
    // Another connection to A (another binding): refused.
    let elsewhere = Connection {
        binding: [3; 32],
        ..at(TpcRole::Source, NOW)
    };
    assert_eq!(
        c.accept(&signed, &elsewhere, TICKET),
        Err(Refusal::OtherConnection)
    );
    // A client certificate other than the one it names.
    let other_client = Connection {
        client: Some("SHA256:someone"),
        ..at(TpcRole::Source, NOW)
    };
    assert!(matches!(
        c.accept(&signed, &other_client, TICKET),
        Err(Refusal::OtherIssuer { .. })
    ));
    // A daemon that asks no client for a certificate cannot tell: the
    // issuer a client with one names is not held against it.
    let open_mode = Connection {
        knows_clients: false,
        ..at(TpcRole::Source, NOW)
    };
    let with_cert = issuer().sign(&Delegation {
        issuer: Some("SHA256:alice".into()),
        ..delegation(1)
    });
    assert!(c.accept(&with_cert, &open_mode, TICKET).is_ok());
    assert_eq!(c.len(), 1, "nothing refused is remembered");
}

#[test]
fn lifetimes_are_bounded_and_judged_against_the_daemons_clock() {
    let mut l = Ledger::default();
    let too_long = Delegation {
        not_after_ms: NOW + MAX_LIFE_MS + 1,
        ..delegation(2)
    };
    assert!(matches!(
        l.accept(&issuer().sign(&too_long), &at(TpcRole::Source, NOW), TICKET),
        Err(Refusal::TooLong { .. })
    ));
    let backwards = Delegation {
        not_after_ms: NOW - 1,
        ..delegation(3)
    };
    assert!(matches!(
        l.accept(
            &issuer().sign(&backwards),
            &at(TpcRole::Source, NOW),
            TICKET
        ),
        Err(Refusal::TooLong { .. })
    ));
    let signed = issuer().sign(&delegation(4));
    assert_eq!(
        l.accept(&signed, &at(TpcRole::Source, NOW + 60_001), TICKET),
        Err(Refusal::Expired { ago_ms: 1 })
    );
    assert!(matches!(
        l.accept(&signed, &at(TpcRole::Source, NOW - MAX_SKEW_MS - 1), TICKET),
        Err(Refusal::NotYetValid { .. })
    ));
    // Within the skew: fine.
    assert!(
        l.accept(&signed, &at(TpcRole::Source, NOW - 1000), TICKET)
            .is_ok()
    );
}

#[test]
fn the_data_session_is_admitted_once_with_its_ticket_before_expiry() {
    let signed = issuer().sign(&delegation(5));
    let mut a = Ledger::default();
    a.accept(&signed, &at(TpcRole::Source, NOW), TICKET)
        .unwrap();
    // Presented with another ticket.
    assert!(matches!(
        a.present(&signed, &[0; 16], NOW + 10, Some(B)),
        Err(Refusal::WrongPeer(_))
    ));
    // The right ticket on a connection showing no certificate, or another
    // daemon's: refused, and the ticket is not spent.
    for shown in [None, Some(A), Some("SHA256:thief")] {
        let refused = a.present(&signed, &TICKET, NOW + 10, shown);
        assert!(
            matches!(&refused, Err(Refusal::WrongPeer(why)) if why.contains("the daemon dialing showed")),
            "{shown:?}: {refused:?}"
        );
    }
    // A different delegation (another nonce's body) was never accepted.
    let other = issuer().sign(&delegation(6));
    assert_eq!(
        a.present(&other, &TICKET, NOW + 10, Some(B)),
        Err(Refusal::Unknown)
    );
    assert!(a.present(&signed, &TICKET, NOW + 10, Some(B)).is_ok());
    assert_eq!(
        a.present(&signed, &TICKET, NOW + 20, Some(B)),
        Err(Refusal::Replayed),
        "used once only"
    );
    // Expired before it was presented.
    let late = issuer().sign(&delegation(7));
    a.accept(&late, &at(TpcRole::Source, NOW), TICKET).unwrap();
    assert_eq!(
        a.present(&late, &TICKET, NOW + 60_005, Some(B)),
        Err(Refusal::Expired { ago_ms: 5 })
    );
}

#[test]
fn only_the_end_the_delegation_names_may_dial() {
    // dialer Dest: B dials A (A is presented to as Source). A push from A
    // into B is not allowed.
    let signed = issuer().sign(&delegation(8));
    let mut b = Ledger::default();
    b.accept(&signed, &at(TpcRole::Dest, NOW), TICKET).unwrap();
    assert!(matches!(
        b.present(&signed, &TICKET, NOW + 1, Some(A)),
        Err(Refusal::WrongPeer(_))
    ));
    let either = issuer().sign(&Delegation {
        dialer: Dialer::Either,
        ..delegation(9)
    });
    b.accept(&either, &at(TpcRole::Dest, NOW), TICKET).unwrap();
    assert_eq!(
        b.present(&either, &TICKET, NOW + 1, Some(A))
            .map(|(role, _)| role),
        Ok(TpcRole::Dest)
    );
}

#[test]
fn a_session_for_another_file_or_place_is_not_covered() {
    let d = delegation(10);
    let asked = SessionMode::Pull {
        sources: vec!["run1/big.h5".into()],
        recursive: false,
    };
    assert_eq!(covers(&d, TpcRole::Source, &asked), Ok(()));
    let other = SessionMode::Pull {
        sources: vec!["run1/secret.h5".into()],
        recursive: false,
    };
    let e = covers(&d, TpcRole::Source, &other).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the delegation covers reading run1/big.h5, not reading run1/secret.h5"
    );
    let deeper = SessionMode::Pull {
        sources: vec!["run1/big.h5".into()],
        recursive: true,
    };
    assert!(covers(&d, TpcRole::Source, &deeper).is_err());
    let push = SessionMode::Push {
        dest: "in/".into(),
        top_level: 1,
    };
    assert_eq!(covers(&d, TpcRole::Dest, &push), Ok(()));
    let elsewhere = SessionMode::Push {
        dest: "etc/".into(),
        top_level: 1,
    };
    assert!(covers(&d, TpcRole::Dest, &elsewhere).is_err());
    assert!(
        covers(&d, TpcRole::Source, &push).is_err(),
        "a push to the source"
    );
}

#[test]
fn the_ledger_is_bounded_and_forgets_what_expired() {
    let mut l = Ledger::default();
    let issuer = issuer();
    for i in 0..MAX_REMEMBERED {
        let mut d = delegation(0);
        d.nonce[..8].copy_from_slice(&(i as u64).to_be_bytes());
        l.accept(&issuer.sign(&d), &at(TpcRole::Source, NOW), TICKET)
            .unwrap();
    }
    let one_more = issuer.sign(&delegation(11));
    assert_eq!(
        l.accept(&one_more, &at(TpcRole::Source, NOW), TICKET),
        Err(Refusal::Busy)
    );
    // Once they expired (and the skew passed), there is room again.
    let later = NOW + 60_000 + MAX_SKEW_MS + 1;
    let fresh = issuer.sign(&Delegation {
        issued_at_ms: later,
        not_after_ms: later + 1000,
        ..delegation(12)
    });
    assert!(
        l.accept(&fresh, &at(TpcRole::Source, later), TICKET)
            .is_ok()
    );
    assert_eq!(l.len(), 1);
}

#[test]
fn a_daemon_at_both_ends_tells_its_roles_apart_by_ticket() {
    let either = issuer().sign(&Delegation {
        dialer: Dialer::Either,
        ..delegation(13)
    });
    let mut one = Ledger::default();
    let both = |role| Connection {
        own_fingerprint: A,
        binding: [1; 32],
        ..at(role, NOW)
    };
    let mut d = delegation(13);
    d.dest.fingerprint = A.into();
    d.dest.binding = [1; 32];
    d.dialer = Dialer::Either;
    let signed = issuer().sign(&d);
    one.accept(&signed, &both(TpcRole::Source), [1; 16])
        .unwrap();
    one.accept(&signed, &both(TpcRole::Dest), [2; 16]).unwrap();
    assert_eq!(
        one.present(&signed, &[2; 16], NOW + 1, Some(A))
            .map(|(role, _)| role),
        Ok(TpcRole::Dest)
    );
    assert_eq!(
        one.present(&signed, &[1; 16], NOW + 1, Some(A))
            .map(|(role, _)| role),
        Ok(TpcRole::Source)
    );
    assert_eq!(
        one.present(&either, &[1; 16], NOW + 1, Some(A)),
        Err(Refusal::Unknown)
    );
}

#[test]
fn an_oversized_body_is_refused_before_it_is_hashed() {
    let mut signed = issuer().sign(&delegation(14));
    signed.body = vec![0; tern_proto::delegation::MAX_BODY + 1];
    assert!(matches!(verify(&signed), Err(Refusal::Malformed(_))));
}
