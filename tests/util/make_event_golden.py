"""Prints the golden bytes of tests/util/test_event_file.cpp: Events serialised by the protocol
buffer classes of the `tensorboard` package, and one of them framed by its own TFRecord writer.
Run with the python of scripts/install_tensorboard.sh:
    "$(scripts/install_tensorboard.sh)" tests/util/make_event_golden.py
"""
import io

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter


def hex_of(data):
    return "".join(f"\\x{b:02x}" for b in data)


version = event_pb2.Event(wall_time=1.5, file_version="brain.Event:2")
scalars = event_pb2.Event(
    wall_time=1700000000.25,
    step=300,
    summary=summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(tag="train/loss", simple_value=0.125),
            summary_pb2.Summary.Value(tag="eval/accuracy", simple_value=91.5),
        ]
    ),
)
start = event_pb2.Event(
    wall_time=2.0, step=7, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
)
framed = io.BytesIO()
RecordWriter(framed).write(scalars.SerializeToString())
for name, data in [
    ("kFileVersionEvent", version.SerializeToString()),
    ("kScalarsEvent", scalars.SerializeToString()),
    ("kSessionStartEvent", start.SerializeToString()),
    ("kScalarsRecord", framed.getvalue()),
]:
    print(f'const std::string {name}("{hex_of(data)}", {len(data)});')
