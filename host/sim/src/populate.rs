//! Fully populated messages, for round-trip tests.
//!
//! "Every field arrives intact" is only a claim if every field is set. Rather
//! than hand-writing fixtures that silently miss the field added next month,
//! [`populated`] walks the message's descriptor and sets every singular,
//! repeated and map field, recursively, to a distinct non-default value.

use protobuf::reflect::{MessageDescriptor, ReflectValueBox, RuntimeFieldType, RuntimeType};
use protobuf::{MessageDyn, MessageFull};

/// How deep nested messages are filled (NRI's schema is about 5 deep).
const MAX_DEPTH: usize = 12;

/// A message of type `M` with every field set; `seed` varies the values.
pub fn populated<M: MessageFull>(seed: u64) -> M {
    let mut counter = seed.wrapping_mul(1000);
    let boxed = fill(&M::descriptor(), 0, &mut counter);
    *boxed.downcast_box::<M>().unwrap_or_else(|_| panic!("descriptor of {} builds another type", M::NAME))
}

fn fill(desc: &MessageDescriptor, depth: usize, n: &mut u64) -> Box<dyn MessageDyn> {
    let mut msg = desc.new_instance();
    if depth >= MAX_DEPTH {
        return msg;
    }
    for field in desc.fields() {
        match field.runtime_field_type() {
            RuntimeFieldType::Singular(t) => {
                let v = value(&t, depth, n, field.name());
                field.set_singular_field(&mut *msg, v);
            }
            RuntimeFieldType::Repeated(t) => {
                for _ in 0..2 {
                    let v = value(&t, depth, n, field.name());
                    field.mut_repeated(&mut *msg).push(v);
                }
            }
            RuntimeFieldType::Map(k, v) => {
                for _ in 0..2 {
                    let key = value(&k, depth, n, field.name());
                    let val = value(&v, depth, n, field.name());
                    field.mut_map(&mut *msg).insert(key, val);
                }
            }
        }
    }
    msg
}

fn value(t: &RuntimeType, depth: usize, n: &mut u64, name: &str) -> ReflectValueBox {
    *n += 1;
    let k = *n;
    match t {
        RuntimeType::I32 => ReflectValueBox::I32(-(k as i32) - 1),
        RuntimeType::I64 => ReflectValueBox::I64(-(k as i64) * 1_000_003 - 1),
        RuntimeType::U32 => ReflectValueBox::U32(k as u32 + 1),
        RuntimeType::U64 => ReflectValueBox::U64(k * 1_000_003 + 1),
        RuntimeType::F32 => ReflectValueBox::F32(k as f32 + 0.5),
        RuntimeType::F64 => ReflectValueBox::F64(k as f64 + 0.25),
        RuntimeType::Bool => ReflectValueBox::Bool(true),
        RuntimeType::String => ReflectValueBox::String(format!("{name}-{k}")),
        RuntimeType::VecU8 => ReflectValueBox::Bytes(k.to_be_bytes().to_vec()),
        RuntimeType::Enum(e) => {
            // A non-zero value, so that it is actually encoded.
            let values: Vec<i32> = e.values().map(|v| v.value()).filter(|v| *v != 0).collect();
            let number = if values.is_empty() { 0 } else { values[k as usize % values.len()] };
            ReflectValueBox::Enum(e.clone(), number)
        }
        RuntimeType::Message(m) => ReflectValueBox::Message(fill(m, depth + 1, n)),
    }
}

/// Every field path of `M` that is left at its default in `msg`; empty when
/// the message is fully populated.
pub fn unset_fields(msg: &dyn MessageDyn) -> Vec<String> {
    let mut out = Vec::new();
    walk(msg, "", 0, &mut out);
    out
}

fn walk(msg: &dyn MessageDyn, prefix: &str, depth: usize, out: &mut Vec<String>) {
    if depth >= MAX_DEPTH {
        return;
    }
    let desc = msg.descriptor_dyn();
    for field in desc.fields() {
        let path = format!("{prefix}{}", field.name());
        if !field.has_field(msg) {
            out.push(path);
            continue;
        }
        if let RuntimeFieldType::Singular(RuntimeType::Message(_)) = field.runtime_field_type() {
            if let Some(sub) = field.get_singular(msg).and_then(|v| v.to_message()) {
                walk(&*sub, &format!("{path}."), depth + 1, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_wasm_api::api as pb;
    use protobuf::Message;

    #[test]
    fn every_field_is_set_and_survives_encoding() {
        let c: pb::CreateContainerRequest = populated(1);
        assert!(unset_fields(&c).is_empty(), "{:?}", unset_fields(&c));
        let bytes = c.write_to_bytes().unwrap();
        assert_eq!(pb::CreateContainerRequest::parse_from_bytes(&bytes).unwrap(), c);
        assert_ne!(populated::<pb::CreateContainerRequest>(2), c);
    }
}
