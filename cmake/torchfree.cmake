# Torch-free parts of zeroshard (launcher environment, run-folder lock, foreign configs,
# TensorBoard event files) as one static library, zs_torchfree, and their tests. They build
# without libtorch, in seconds. Use from the top-level CMakeLists.txt:
#
#   include(cmake/torchfree.cmake)                         # after find_package(...) lines
#   target_link_libraries(zeroshard_lib PUBLIC zs_torchfree)
#
# Needs Debian's libprotobuf-dev + protobuf-compiler (event files), libyaml-cpp-dev,
# nlohmann-json3-dev; the tests also libgtest-dev and python3-protobuf.
find_package(Protobuf REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Threads REQUIRED)

add_library(zs_torchfree STATIC
  ${PROJECT_SOURCE_DIR}/src/comm/launch_env.cpp
  ${PROJECT_SOURCE_DIR}/src/comm/slurm_lists.cpp
  ${PROJECT_SOURCE_DIR}/src/io/run_lock.cpp
  ${PROJECT_SOURCE_DIR}/src/io/tensorboard.cpp
  ${PROJECT_SOURCE_DIR}/src/train/foreign_config.cpp
  ${PROJECT_SOURCE_DIR}/src/train/foreign_deepspeed.cpp
  ${PROJECT_SOURCE_DIR}/src/io/tensorboard_event.proto)
# tensorboard_event.pb.{h,cc} land in <build>/zs_proto, included as "tensorboard_event.pb.h".
# APPEND_PATH: protoc sees the proto's own folder as its import root, so the outputs sit
# directly in PROTOC_OUT_DIR (without it CMake 3.25 expects them under src/io/ there).
set(ZS_PROTO_OUT ${CMAKE_CURRENT_BINARY_DIR}/zs_proto)
file(MAKE_DIRECTORY ${ZS_PROTO_OUT})
protobuf_generate(TARGET zs_torchfree LANGUAGES cpp APPEND_PATH PROTOC_OUT_DIR ${ZS_PROTO_OUT})
target_include_directories(zs_torchfree PUBLIC ${PROJECT_SOURCE_DIR}/src ${ZS_PROTO_OUT})
target_link_libraries(zs_torchfree PUBLIC protobuf::libprotobuf yaml-cpp nlohmann_json::nlohmann_json Threads::Threads)
if(DEFINED ZS_WARNINGS)
  target_compile_options(zs_torchfree PRIVATE ${ZS_WARNINGS})
endif()
# The generated code is protoc's: not held to our warning flags.
set_source_files_properties(${ZS_PROTO_OUT}/tensorboard_event.pb.cc PROPERTIES COMPILE_OPTIONS "-w")

if(ZEROSHARD_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  add_executable(zs_torchfree_tests
    ${PROJECT_SOURCE_DIR}/tests/comm/test_launch_env.cpp
    ${PROJECT_SOURCE_DIR}/tests/io/test_run_lock.cpp
    ${PROJECT_SOURCE_DIR}/tests/io/test_tensorboard.cpp
    ${PROJECT_SOURCE_DIR}/tests/train/test_foreign_config.cpp)
  target_link_libraries(zs_torchfree_tests PRIVATE zs_torchfree GTest::gtest_main)
  target_compile_definitions(zs_torchfree_tests PRIVATE ZS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(zs_torchfree_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)

  # resolve_launch_env under the real srun / sbatch / salloc / mpirun (skips, status 77,
  # without root, Slurm or Open MPI).
  add_executable(zs_launch_env_probe ${PROJECT_SOURCE_DIR}/tests/launch/launch_env_probe.cpp)
  target_link_libraries(zs_launch_env_probe PRIVATE zs_torchfree)
  add_test(NAME real_launchers
           COMMAND ${PROJECT_SOURCE_DIR}/tests/launch/test_real_launchers.sh $<TARGET_FILE:zs_launch_env_probe>)
  set_tests_properties(real_launchers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
