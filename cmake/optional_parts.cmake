# The optional parts of the build and the one-line summary of what is built.
#
# gdn_optional_package(<option> <package> <what>) decides a part that needs a package: <option>
# is AUTO (built when find_package(<package>) finds it; otherwise skipped, saying so), ON (the
# package is required) or OFF. Sets GDN_WITH_<package> and records the outcome for the summary.
macro(gdn_optional_package option package what)
  set(GDN_WITH_${package} OFF)
  if("${${option}}" STREQUAL "AUTO")
    find_package(${package} QUIET)
    if(${package}_FOUND)
      set(GDN_WITH_${package} ON)
    else()
      message(STATUS "gdn: ${package} not found: skipping ${what} (-D${option}=ON to require it)")
      gdn_skipped("${what} (no ${package})")
    endif()
  elseif(${option})
    find_package(${package} REQUIRED)
    set(GDN_WITH_${package} ON)
  else()
    gdn_skipped("${what} (${option}=OFF)")
  endif()
  if(GDN_WITH_${package})
    gdn_built("${what}")
  endif()
endmacro()

# What the summary lists: gdn_built(<part>), gdn_skipped(<part and why>).
set(GDN_PARTS_BUILT "")
set(GDN_PARTS_SKIPPED "")
macro(gdn_built part)
  list(APPEND GDN_PARTS_BUILT "${part}")
endmacro()
macro(gdn_skipped part)
  list(APPEND GDN_PARTS_SKIPPED "${part}")
endmacro()

function(gdn_print_summary)
  list(JOIN GDN_PARTS_BUILT ", " built)
  list(JOIN GDN_PARTS_SKIPPED ", " skipped)
  if(NOT skipped)
    set(skipped "nothing")
  endif()
  message(STATUS "gdn ${PROJECT_VERSION}: building ${built}; skipping ${skipped}")
endfunction()
