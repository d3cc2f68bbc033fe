package vlog

import (
	"encoding/binary"
	"fmt"
)

// FileState is the life-cycle state of a blob file in the engine's
// manifest.
type FileState byte

const (
	// FileActive: being appended to (by the foreground writer or a GC job).
	// After a crash its tail may be torn and its discard count incomplete
	// (records written but never referenced); recovery rescans it.
	FileActive FileState = 1
	// FileSealed: complete; its discard count is exact.
	FileSealed FileState = 2
	// FileObsolete: every live record was moved out; the file is deleted
	// once no reader can hold a pointer into it.
	FileObsolete FileState = 3
)

func (s FileState) String() string {
	switch s {
	case FileActive:
		return "active"
	case FileSealed:
		return "sealed"
	case FileObsolete:
		return "obsolete"
	}
	return fmt.Sprintf("state(%d)", byte(s))
}

// FileMeta is the persisted description of a blob file. The discard count
// is kept apart (it is a merge counter updated by every write batch).
type FileMeta struct {
	State FileState
	// SizeBytes and RecordBytes: see FileStats. Exact once sealed.
	SizeBytes, RecordBytes int64
	// PunchedDiscardBytes: see FileStats.
	PunchedDiscardBytes int64
}

const fileMetaBytes = 1 + 3*8

// Encode returns the encoding of m.
func (m FileMeta) Encode() []byte {
	b := make([]byte, fileMetaBytes)
	b[0] = byte(m.State)
	binary.LittleEndian.PutUint64(b[1:], uint64(m.SizeBytes))
	binary.LittleEndian.PutUint64(b[9:], uint64(m.RecordBytes))
	binary.LittleEndian.PutUint64(b[17:], uint64(m.PunchedDiscardBytes))
	return b
}

// DecodeFileMeta decodes an encoding made by Encode.
func DecodeFileMeta(b []byte) (FileMeta, error) {
	if len(b) != fileMetaBytes || b[0] < byte(FileActive) || b[0] > byte(FileObsolete) {
		return FileMeta{}, fmt.Errorf("%w: bad file meta (%d bytes)", ErrCorruption, len(b))
	}
	return FileMeta{
		State:               FileState(b[0]),
		SizeBytes:           int64(binary.LittleEndian.Uint64(b[1:])),
		RecordBytes:         int64(binary.LittleEndian.Uint64(b[9:])),
		PunchedDiscardBytes: int64(binary.LittleEndian.Uint64(b[17:])),
	}, nil
}
