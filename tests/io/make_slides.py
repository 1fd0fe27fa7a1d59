#!/usr/bin/env python3
"""Slides in the formats hospitals and imaging labs store, made from ../shared/slides by
third-party tools (tests/io/slide_formats_test.cpp reads them). Usage: make_slides.py OUT SHARED

OUT/dicom/cmu-1/       cmu-1-small-region.svs as DICOM WSI (wsidicomizer: the SVS's JPEG tiles
                       copied, not re-encoded, so level 0 decodes to the SVS's own pixels)
OUT/dicom/small/       small.svs likewise
OUT/dicom/mixed/       both slides' instances in one folder (must be refused)
OUT/dicom/truncated/   cmu-1's instances with the level-0 one cut to a quarter of its bytes
OUT/dicom/not-a-slide.dcm   a DICOM secondary-capture image: DICOM, but not a slide
OUT/ome/pyramid.ome.tif     a pyramidal OME-TIFF as QuPath and bfconvert write it (levels in
                       SubIFDs, PhysicalSizeX/Y in the OME-XML, no TIFF resolution tags)
OUT/ome/lying.ome.tif  the same whose OME-XML says a size the pixels do not have
"""
import shutil
import sys
from pathlib import Path

import numpy as np
import pydicom
import tifffile
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid
from wsidicomizer import WsiDicomizer

OME_MPP = 0.25  # µm per level-0 pixel of the OME-TIFF


def level0_instance(folder: Path) -> Path:
    """The instance holding the largest image (the level-0 pyramid level)."""
    return max(folder.iterdir(), key=lambda f: f.stat().st_size)


def dicom(out: Path, shared: Path) -> None:
    for name, source in (("cmu-1", "cmu-1-small-region.svs"), ("small", "small.svs")):
        WsiDicomizer.convert(shared / source, out / name, workers=1)
    (out / "mixed").mkdir()
    for name in ("cmu-1", "small"):
        for f in (out / name).iterdir():
            shutil.copy(f, out / "mixed" / f.name)
    shutil.copytree(out / "cmu-1", out / "truncated")
    victim = level0_instance(out / "truncated")
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 4])

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(str(out / "not-a-slide.dcm"), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID, ds.SeriesInstanceUID = generate_uid(), generate_uid()
    ds.Modality, ds.PatientName, ds.PatientID = "OT", "Test^Tessel", "0"
    ds.Rows, ds.Columns, ds.SamplesPerPixel = 8, 8, 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = bytes(range(64))
    ds.save_as(out / "not-a-slide.dcm", enforce_file_format=True)


def ome_pyramid(path: Path, lie: bool = False) -> None:
    rng = np.random.default_rng(55)
    base = np.full((1000, 1500, 3), 240, np.uint8)
    base[100:600, 200:900] = rng.integers(0, 256, (500, 700, 3), dtype=np.uint8)
    levels = [base, base[::2, ::2], base[::4, ::4]]
    options = dict(photometric="rgb", tile=(256, 256), compression="zlib")
    metadata = {"axes": "YXS", "PhysicalSizeX": OME_MPP, "PhysicalSizeXUnit": "µm",
                "PhysicalSizeY": OME_MPP, "PhysicalSizeYUnit": "µm"}
    with tifffile.TiffWriter(path, ome=True) as tif:
        tif.write(base, subifds=len(levels) - 1, metadata=metadata, **options)
        for level in levels[1:]:
            tif.write(level, subfiletype=1, **options)
    if lie:
        with tifffile.TiffFile(path) as tif:
            xml = tif.pages[0].description
        lying = xml.replace('SizeX="1500"', 'SizeX="150000"').replace('SizeY="1000"',
                                                                      'SizeY="100000"')
        assert lying != xml
        tifffile.tiffcomment(path, lying.encode())


def main() -> None:
    out, shared = Path(sys.argv[1]), Path(sys.argv[2])
    if out.exists():
        shutil.rmtree(out)
    (out / "ome").mkdir(parents=True)
    (out / "dicom").mkdir()
    dicom(out / "dicom", shared)
    ome_pyramid(out / "ome" / "pyramid.ome.tif")
    ome_pyramid(out / "ome" / "lying.ome.tif", lie=True)
    print(f"make_slides: slides in {out}")


if __name__ == "__main__":
    main()
