//! Decodes arbitrary bytes as native protocol frames, as a server and a client do: decoding must
//! never panic, whatever the bytes, and whatever decodes must encode back to a frame that decodes
//! to the same message (requests and responses both).
#![no_main]

use bytes::BytesMut;
use ferrite_proto::{Header, Opcode, Request, Response, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(header) = Header::parse(data) else { return };
    let body = &data[HEADER_BYTES..];
    let body = &body[..body.len().min(header.body_len as usize)];
    if let Ok(request) = Request::decode(&header, body) {
        let mut frame = BytesMut::new();
        request.encode(header.request_id, &mut frame);
        let again = Header::parse(&frame).expect("an encoded frame has a header");
        assert_eq!(Request::decode(&again, &frame[HEADER_BYTES..]).as_ref(), Ok(&request));
    }
    if let Ok(response) = Response::decode(&header, body) {
        let mut frame = BytesMut::new();
        let answers = Opcode::from_request(header.opcode & 0x7FFF).unwrap_or(Opcode::Error);
        response.encode_answer(answers, header.request_id, &mut frame);
        let again = Header::parse(&frame).expect("an encoded frame has a header");
        assert_eq!(Response::decode(&again, &frame[HEADER_BYTES..]).as_ref(), Ok(&response));
    }
});
