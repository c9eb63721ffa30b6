"""The writer holds itself to the readers' model of metadata.json."""

import pytest

from beam_jobs import output as out
from shardspec.folder import MetadataError
from shardspec.layout import METADATA, SUCCESS


def test_a_document_the_readers_would_refuse_is_not_written_and_the_old_output_stays(tmp_path):
    previous = tmp_path / "shards"
    previous.mkdir()
    (previous / METADATA).write_text('{"old": true}')
    (previous / SUCCESS).write_text("")
    staging = out.new_staging_dir(str(previous))
    bad = {"schema_version": 1, "label_map": {"cat": "not a number"}, "splits": {}}
    with pytest.raises(MetadataError, match="malformed"):
        out.replace_output(str(previous), staging, bad, success=True)
    assert (previous / METADATA).read_text() == '{"old": true}'
    assert (previous / SUCCESS).exists()
