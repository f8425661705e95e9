"""Reads a TensorBoard event file with Python's protobuf (Debian's python3-protobuf): the TFRecord
framing with both masked CRC32Cs, and each record parsed as tensorflow.Event (the messages are
declared here from event.proto / summary.proto's field numbers, no TensorFlow needed). Prints
tag step value lines. Exit 77 (skipped) without google.protobuf, 1 on a bad file.
Usage: tb_events_check.py EVENT_FILE"""
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("SKIP: no python3-protobuf (google.protobuf)")
    sys.exit(77)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    fd = descriptor_pb2.FileDescriptorProto(name="tb_event_check.proto", package="tensorflow", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    val = fd.message_type.add(name="SummaryValue")
    val.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    val.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summ = fd.message_type.add(name="Summary")
    summ.field.add(name="value", number=1, type=F.TYPE_MESSAGE, type_name=".tensorflow.SummaryValue",
                   label=F.LABEL_REPEATED)
    ev = fd.message_type.add(name="Event")
    ev.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    ev.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    ev.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    ev.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, type_name=".tensorflow.Summary",
                 label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def main():
    Event = event_class()
    data = open(sys.argv[1], "rb").read()
    k, n = 0, 0
    while k < len(data):
        (length,) = struct.unpack_from("<Q", data, k)
        (lcrc,) = struct.unpack_from("<I", data, k + 8)
        if lcrc != masked(data[k:k + 8]):
            print(f"FAIL: record {n}: length CRC"); return 1
        payload = data[k + 12:k + 12 + length]
        (dcrc,) = struct.unpack_from("<I", data, k + 12 + length)
        if dcrc != masked(payload):
            print(f"FAIL: record {n}: data CRC"); return 1
        e = Event()
        e.ParseFromString(payload)
        if n == 0:
            if e.file_version != "brain.Event:2":
                print(f"FAIL: file_version {e.file_version!r}"); return 1
        for v in e.summary.value:
            print(v.tag, e.step, repr(v.simple_value))
        k += 12 + length + 4
        n += 1
    return 0 if n > 1 else 1


sys.exit(main())
