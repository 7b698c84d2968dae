# ddp::formats: PyTorch's file formats without Python (ddp/formats.hpp):
# torch.save's zip archive and pickle, safetensors, and which format a file
# is in; every reader checks a file before it trusts it (Note [A hostile
# file is an error] in ddp/formats/torch_file.hpp). It stands on ddp::base
# and LibTorch only; ddp::snapshot maps these files to a training state.
# Included by the top-level CMakeLists.txt after the layers.
ddp_add_library(formats STATIC DEPENDS ddp_base SOURCES
  ${PROJECT_SOURCE_DIR}/src/formats/py_value.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/zip_directory.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/file_format.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/atomic_file.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/pickle_reader.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/tree_bounds.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/torch_file_reader.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/pickle_writer.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/torch_file_writer.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/safetensors_file.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/dcp_metadata_reader.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/dcp_metadata_writer.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/dcp_reader.cpp
  ${PROJECT_SOURCE_DIR}/src/formats/dcp_writer.cpp)
target_link_libraries(ddp_formats PUBLIC ${TORCH_LIBRARIES})
