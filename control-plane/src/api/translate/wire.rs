//! Protobuf's wire format read without a schema, for tests that corrupt a message's values and
//! still send valid encodings: a length-delimited field that parses whole as fields is taken for
//! a nested message (a string may be too; changing it then is still a change).

use rand::{rngs::SmallRng, Rng};

#[derive(Debug, Clone)]
pub enum Value {
    Varint(u64),
    Fixed64([u8; 8]),
    Fixed32([u8; 4]),
    Bytes(Vec<u8>),
    Message(Vec<Field>),
}

#[derive(Debug, Clone)]
pub struct Field {
    pub number: u64,
    pub value: Value,
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn take<const N: usize>(b: &[u8], at: &mut usize) -> Option<[u8; N]> {
    let v = b.get(*at..*at + N)?.try_into().ok()?;
    *at += N;
    Some(v)
}

/// The fields of `b`, or `None` if `b` is not a message.
pub fn parse(b: &[u8]) -> Option<Vec<Field>> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let key = varint(b, &mut at)?;
        let (number, wire) = (key >> 3, key & 7);
        if number == 0 {
            return None;
        }
        let value = match wire {
            0 => Value::Varint(varint(b, &mut at)?),
            1 => Value::Fixed64(take(b, &mut at)?),
            5 => Value::Fixed32(take(b, &mut at)?),
            2 => {
                let len = usize::try_from(varint(b, &mut at)?).ok()?;
                let inner = b.get(at..at.checked_add(len)?)?;
                at += len;
                match parse(inner) {
                    Some(m) if !inner.is_empty() => Value::Message(m),
                    _ => Value::Bytes(inner.to_vec()),
                }
            }
            _ => return None,
        };
        fields.push(Field { number, value });
    }
    Some(fields)
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The encoding of `fields`.
pub fn encode(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        let wire = match f.value {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Bytes(_) | Value::Message(_) => 2,
            Value::Fixed32(_) => 5,
        };
        put_varint(f.number << 3 | wire, out);
        match &f.value {
            Value::Varint(v) => put_varint(*v, out),
            Value::Fixed64(b) => out.extend_from_slice(b),
            Value::Fixed32(b) => out.extend_from_slice(b),
            Value::Bytes(b) => {
                put_varint(b.len() as u64, out);
                out.extend_from_slice(b);
            }
            Value::Message(m) => {
                let mut inner = Vec::new();
                encode(m, &mut inner);
                put_varint(inner.len() as u64, out);
                out.extend(inner);
            }
        }
    }
}

const VARINTS: &[u64] = &[
    0,
    1,
    2,
    7,
    100,
    999_999_999,
    1_000_000_000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    u64::MAX,
    u64::MAX - 1_000_000_000,
];
const DOUBLES: &[f64] = &[
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -1.0,
    0.0,
    0.5,
    1.0,
    100.0,
    100.5,
    1e300,
];
const STRINGS: &[&str] = &[
    "",
    "x",
    "0",
    "-1",
    "/",
    "//",
    "(",
    "[",
    "*",
    "^",
    "a{2,1}",
    "10.0.0.1:0",
    "[::1]:80",
    "300.0.0.1:80",
    "é",
    "\0",
    "GET ",
    "a b",
    "x-a",
    "header:",
    "1ms",
    "-1s",
];

/// Changes one leaf value of `fields` (somewhere in the tree), or drops, repeats or adds a field.
pub fn mutate(rng: &mut SmallRng, fields: &mut Vec<Field>) {
    if fields.is_empty() || rng.gen_bool(0.1) {
        let value = Value::Varint(VARINTS[rng.gen_range(0..VARINTS.len())]);
        fields.push(Field {
            number: rng.gen_range(1..20),
            value,
        });
        return;
    }
    let at = rng.gen_range(0..fields.len());
    match rng.gen_range(0..10) {
        0 => {
            fields.remove(at);
            return;
        }
        1 => {
            let copy = fields[at].clone();
            fields.insert(at, copy);
            return;
        }
        _ => {}
    }
    let f = &mut fields[at];
    match &mut f.value {
        Value::Message(m) if rng.gen_bool(0.85) => mutate(rng, m),
        Value::Varint(v) => *v = VARINTS[rng.gen_range(0..VARINTS.len())],
        Value::Fixed64(b) => *b = DOUBLES[rng.gen_range(0..DOUBLES.len())].to_le_bytes(),
        Value::Fixed32(b) => *b = (DOUBLES[rng.gen_range(0..DOUBLES.len())] as f32).to_le_bytes(),
        value => {
            *value = Value::Bytes(STRINGS[rng.gen_range(0..STRINGS.len())].as_bytes().to_vec())
        }
    }
}
